from collections.abc import Sequence
from typing import TypeAlias, TypeVar

# einops' own signatures (a test compares them with einops' sources): the tensors are any
# type, as einops' `Tensor` TypeVar makes them; a tuple of shapes is taken as well as a list.
_Tensor = TypeVar("_Tensor")
Shape: TypeAlias = tuple[int, ...] | list[int]

def pack(tensors: Sequence[_Tensor], pattern: str) -> tuple[_Tensor, list[Shape]]: ...
def unpack(tensor: _Tensor, packed_shapes: Sequence[Shape], pattern: str) -> list[_Tensor]: ...
