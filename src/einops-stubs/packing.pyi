from collections.abc import Sequence
from typing import TypeAlias, TypeVar

from .einops import _Array

_T = TypeVar("_T", bound=_Array | None)
Shape: TypeAlias = tuple[int, ...] | list[int]

def pack(tensors: Sequence[_T], pattern: str) -> tuple[_T, list[Shape]]: ...
def unpack(tensor: _T, packed_shapes: Sequence[Shape], pattern: str) -> list[_T]: ...
