from collections.abc import Sequence
from typing import TypeAlias, TypeVar

# Sequences of tensors are taken as einops' own hints take them (items unchecked).
_T = TypeVar("_T")
Shape: TypeAlias = tuple[int, ...] | list[int]

def pack(tensors: Sequence[_T], pattern: str) -> tuple[_T, list[Shape]]: ...
def unpack(tensor: _T, packed_shapes: Sequence[Shape], pattern: str) -> list[_T]: ...
