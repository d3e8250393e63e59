"""Index bounds a dry run checks where the indices' values are known.

A ``meta`` kernel checks shapes, not values: ``embedding`` on meta takes position ids past
the table's last row (a GPT-2 with 64 positions estimated at ``seq=65``) and gives a count
for a call that a real run refuses (``IndexError: index out of range in self``). Where a
dry run knows an index tensor's values from shapes (``torch.arange(seq)``, see
:mod:`.known_values`), :func:`check_bounds` checks them as the CPU kernel does and raises
its error, so that the estimate stops at the user's line, as a real run would, instead of
counting work that cannot run.

Each op reads its source's size along one dim (``embedding``: the table's rows,
``gather``: ``self.size(dim)``) and takes indices in ``[0, size)``, or ``[-size, size)``
for the ops that count from the end (``x[idx]``, ``index_put``, ``index_fill``, ``take``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["check_bounds"]

#: (the source's argument, the dim's argument (an int: that dim itself), the index's
#: argument, whether indices may count from the end) by op name, in-place forms alike.
_ALONG: dict[str, tuple[int, int | str, int, bool]] = {
    "embedding": (0, 0, 1, False),
    "_embedding_bag": (0, 0, 1, False),
    "_embedding_bag_forward_only": (0, 0, 1, False),
    "embedding_bag": (0, 0, 1, False),
    "index_select": (0, "arg1", 2, False),
    "gather": (0, "arg1", 2, False),
    "scatter": (0, "arg1", 2, False),
    "scatter_add": (0, "arg1", 2, False),
    "scatter_reduce": (0, "arg1", 2, False),
    "index_add": (0, "arg1", 2, False),
    "index_copy": (0, "arg1", 2, False),
    "index_reduce": (0, "arg1", 2, False),
    "index_fill": (0, "arg1", 2, True),
}

#: Ops indexed by a list of indices, one per leading dim (``x[i, j]``, ``x[i] = v``).
_BY_LIST = frozenset({"index", "index_put", "_index_put_impl"})


def check_bounds(
    func: Any, args: tuple[Any, ...], values: Callable[[torch.Tensor], torch.Tensor | None]
) -> None:
    """Raise the error the CPU kernel of ``func`` raises where an index whose values are
    known (``values``: a tensor's values on the CPU, None where unknown) is out of bounds;
    nothing where the indices are in bounds or their values unknown."""
    name = _NAMES.get(func)
    if name is None:
        name = _NAMES[func] = _name(func)
    if not name:
        return
    if name in _BY_LIST:
        source, indices = args[0], args[1]
        for dim, index in enumerate(indices):
            if _is_long(index):
                _check(values(index), source.shape[dim], dim, True)
        return
    if name == "take":
        _check(values(args[1]) if _is_long(args[1]) else None, args[0].numel(), None, True)
        return
    along = _ALONG.get(name)
    if along is None or len(args) <= along[2]:
        return
    source, index = args[along[0]], args[along[2]]
    if not isinstance(source, torch.Tensor) or not _is_long(index):
        return
    at = args[1] if isinstance(along[1], str) else along[1]
    if not isinstance(at, int) or source.dim() == 0:
        return
    at = at % source.dim()
    _check(values(index), source.shape[at], at, along[3])


#: Each op's name in the tables above ("" for one that takes no index), by op.
_NAMES: dict[Any, str] = {}


def _name(func: Any) -> str:
    name: str = func._overloadpacket.__name__
    if name.endswith("_") and not name.startswith("__"):
        name = name[:-1]  # (an in-place form: the same bounds)
    return name if name in _ALONG or name in _BY_LIST or name == "take" else ""


def _is_long(index: Any) -> bool:
    return isinstance(index, torch.Tensor) and index.dtype in (torch.int64, torch.int32)


def _check(found: torch.Tensor | None, size: int, dim: int | None, from_end: bool) -> None:
    """Raise where a value of ``found`` is outside ``[0, size)`` (``[-size, size)`` where
    indices may count from the end), in torch's words."""
    if found is None or not found.numel():
        return
    with _disable_current_modes():  # (the values on the CPU: no mode below, a fake one, sees them)
        low, high = int(found.min()), int(found.max())
    bad = high if high >= size else (low if low < (-size if from_end else 0) else None)
    if bad is None:
        return
    if dim is None:
        raise IndexError(
            f"out of range: tried to access index {bad} on a tensor of {size} elements."
        )
    raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {size}")
