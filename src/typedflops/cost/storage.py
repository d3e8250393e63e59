"""Bytes and aliasing of tensors: the one helper the cost rules and :mod:`typedflops.memory`
share (re-exported there)."""

from __future__ import annotations

import torch

__all__ = ["nbytes", "same_storage"]


def nbytes(x: torch.Tensor) -> int:
    """Bytes of the elements of ``x`` (any shape): ``numel * element_size``; for a nested
    (jagged) or sparse tensor, of the values it holds. The cost rules count bytes with it.

    >>> nbytes(torch.zeros(4, 8, 8, dtype=torch.float32))
    1024
    >>> nbytes(torch.zeros(4, 8, 8, dtype=torch.bfloat16))
    512
    >>> nbytes(torch.zeros(0, 8, device="meta"))
    0
    """
    if x.is_nested:
        return nbytes(x.values())
    if x.layout is torch.sparse_coo:
        return nbytes(x._values())
    return x.numel() * x.element_size()


def same_storage(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether ``x`` and ``y`` share one storage (one is a view of the other, or both are).

    Storages are compared themselves, not their data pointers, so this holds on ``meta``
    and empty tensors too (where every data pointer is 0): the rule the cost model uses
    for a view (0 bytes) is the same.

    >>> x = torch.arange(6.0).reshape(2, 3)
    >>> same_storage(x, x.T), same_storage(x, x.T.contiguous())
    (True, False)
    >>> meta = torch.empty(3, device="meta")
    >>> same_storage(meta, torch.empty(3, device="meta")), same_storage(meta, meta[1:])
    (False, True)
    """
    return bool(x.untyped_storage()._cdata == y.untyped_storage()._cdata)
