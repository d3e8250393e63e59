# einops' own signatures, overload by overload (a test compares them with einops' sources):
# the tensor is any type, as einops' unbounded `Tensor` TypeVar makes it, so whatever
# einops' hints accept is accepted here too. typedflops' mypy plugin checks the patterns.
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar, overload

_Tensor = TypeVar("_Tensor")

# A name ("min", "max", "sum", "mean", "prod", "any", "all"; typedflops' plugin checks a
# literal one) or a callable that gets the tensor and the axes to reduce.
Reduction: TypeAlias = str | Callable[[_Tensor, tuple[int, ...]], _Tensor]
# einops takes axis lengths as they come (ints, symbolic sizes of traced code).
Size: TypeAlias = Any

# A list of tensors is stacked along a new first axis.
@overload
def rearrange(tensor: list[_Tensor], pattern: str, **axes_lengths: Size) -> _Tensor: ...
@overload
def rearrange(tensor: _Tensor, pattern: str, **axes_lengths: Size) -> _Tensor: ...
@overload
def reduce(
    tensor: list[_Tensor], pattern: str, reduction: Reduction[_Tensor], **axes_lengths: Size
) -> _Tensor: ...
@overload
def reduce(
    tensor: _Tensor, pattern: str, reduction: Reduction[_Tensor], **axes_lengths: Size
) -> _Tensor: ...
@overload
def repeat(tensor: list[_Tensor], pattern: str, **axes_lengths: Size) -> _Tensor: ...
@overload
def repeat(tensor: _Tensor, pattern: str, **axes_lengths: Size) -> _Tensor: ...
@overload
def einsum(tensor: _Tensor, pattern: str, /) -> _Tensor: ...
@overload
def einsum(tensor1: _Tensor, tensor2: _Tensor, pattern: str, /) -> _Tensor: ...
@overload
def einsum(tensor1: _Tensor, tensor2: _Tensor, tensor3: _Tensor, pattern: str, /) -> _Tensor: ...
@overload
def einsum(
    tensor1: _Tensor, tensor2: _Tensor, tensor3: _Tensor, tensor4: _Tensor, pattern: str, /
) -> _Tensor: ...

# einops' implementation signature, which its overloads leave out: more than four tensors,
# or `einsum(*tensors, pattern)`, both of which einops runs.
@overload
def einsum(*tensors_and_pattern: _Tensor | str) -> _Tensor: ...

# The axis lengths by name (einops' own hint says `dict`).
def parse_shape(x: _Tensor, pattern: str) -> dict[str, int]: ...
def asnumpy(tensor: _Tensor) -> Any: ...

__all__ = ["asnumpy", "einsum", "parse_shape", "rearrange", "reduce", "repeat"]
