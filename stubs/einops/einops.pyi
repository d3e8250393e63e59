from collections.abc import Callable
from typing import Any, Literal, TypeAlias, TypeVar, overload

import numpy.typing as npt
from torch import Tensor

_T = TypeVar("_T", bound=Tensor)

ReductionName: TypeAlias = Literal["min", "max", "sum", "mean", "prod", "any", "all"]
# A callable reduction gets the tensor and the axes to reduce.
Reduction: TypeAlias = ReductionName | Callable[[Tensor, tuple[int, ...]], Tensor]

# One signature each, not overloads: a plugin error inside an overload candidate would make
# mypy reject the candidate (typedflops' plugin reports on these calls).
def rearrange(tensor: _T | list[_T], pattern: str, **axes_lengths: int) -> _T: ...
def reduce(
    tensor: _T | list[_T], pattern: str, reduction: Reduction, **axes_lengths: int
) -> _T: ...
def repeat(tensor: _T | list[_T], pattern: str, **axes_lengths: int) -> _T: ...
@overload
def einsum(tensor: Tensor, pattern: str, /) -> Tensor: ...
@overload
def einsum(tensor1: Tensor, tensor2: Tensor, pattern: str, /) -> Tensor: ...
@overload
def einsum(tensor1: Tensor, tensor2: Tensor, tensor3: Tensor, pattern: str, /) -> Tensor: ...
@overload
def einsum(
    tensor1: Tensor, tensor2: Tensor, tensor3: Tensor, tensor4: Tensor, pattern: str, /
) -> Tensor: ...
@overload
def einsum(*tensors_and_pattern: Tensor | str) -> Tensor: ...
def parse_shape(x: Tensor, pattern: str) -> dict[str, int]: ...
def asnumpy(tensor: Tensor) -> npt.NDArray[Any]: ...

__all__ = ["asnumpy", "einsum", "parse_shape", "rearrange", "reduce", "repeat"]
