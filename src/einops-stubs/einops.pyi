from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, TypeVar, overload

class _Array(Protocol):
    # What einops works on: torch tensors, numpy arrays and the other array types it
    # supports all have a shape. None is allowed (einops' own hints allow it), so an
    # Optional tensor is left to mypy's own settings rather than rejected here.
    @property
    def shape(self) -> Any: ...

_T = TypeVar("_T", bound=_Array | None)
# Lists are taken as einops' own hints take them: what mypy infers for a list's items (a
# list rebound to a tensor, say) is not checked here.
_U = TypeVar("_U")

# A name ("min", "max", "sum", "mean", "prod", "any", "all"; typedflops' plugin checks a
# literal one) or a callable that gets the tensor and the axes to reduce.
Reduction: TypeAlias = str | Callable[..., Any]
# einops takes axis lengths as they come (ints, symbolic sizes of traced code).
Size: TypeAlias = Any

# A list of tensors is stacked along a new first axis; the overloads keep einops' own
# order, so the types mypy infers are the ones einops' own hints give.
@overload
def rearrange(tensor: list[_U], pattern: str, **axes_lengths: Size) -> _U: ...
@overload
def rearrange(tensor: _T, pattern: str, **axes_lengths: Size) -> _T: ...
@overload
def reduce(tensor: list[_U], pattern: str, reduction: Reduction, **axes_lengths: Size) -> _U: ...
@overload
def reduce(tensor: _T, pattern: str, reduction: Reduction, **axes_lengths: Size) -> _T: ...
@overload
def repeat(tensor: list[_U], pattern: str, **axes_lengths: Size) -> _U: ...
@overload
def repeat(tensor: _T, pattern: str, **axes_lengths: Size) -> _T: ...
@overload
def einsum(tensor: _T, pattern: str, /) -> _T: ...
@overload
def einsum(tensor1: _T, tensor2: _T, pattern: str, /) -> _T: ...
@overload
def einsum(tensor1: _T, tensor2: _T, tensor3: _T, pattern: str, /) -> _T: ...
@overload
def einsum(tensor1: _T, tensor2: _T, tensor3: _T, tensor4: _T, pattern: str, /) -> _T: ...
@overload
def einsum(*tensors_and_pattern: _T | str) -> _T: ...
def parse_shape(x: _Array | None, pattern: str) -> dict[str, int]: ...
def asnumpy(tensor: _Array | None) -> Any: ...  # as einops types it

__all__ = ["asnumpy", "einsum", "parse_shape", "rearrange", "reduce", "repeat"]
