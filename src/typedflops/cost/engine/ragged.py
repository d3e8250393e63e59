"""Sizes a jagged batch gives: its ragged dim is torch's nested int (``j1``), rows of
other lengths, no one number a row of a record can name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .fit import Size

__all__ = ["whole_or_ragged", "whole_sizes", "without_ragged"]


def whole_or_ragged(size: Any) -> Any:
    """A shape's size as an int, or a jagged tensor's ragged size as it is."""
    if isinstance(size, torch.SymInt) and size.node.is_nested_int():
        return size
    return int(size)


def whole_sizes(dims: Mapping[str, Size]) -> bool:
    """Whether every size in ``dims`` is a number (a jagged tensor's ragged dim is torch's
    nested int ``j1``: its rows have no one length)."""
    for size in dims.values():
        if type(size) is not int and (
            type(size) is not tuple or any(type(part) is not int for part in size)
        ):
            return False
    return True


def without_ragged(dims: Mapping[str, Size]) -> dict[str, Size]:
    """``dims`` less those with a ragged size (a jagged batch's ``seq`` of lengths 3 and 5,
    a ``*batch`` or ``...`` that holds it): a row names the sizes its calls share, and its
    count of a jagged batch stays a number."""
    return {name: size for name, size in dims.items() if whole_sizes({name: size})}
