"""What an op saw of a tensor: its metadata, never its storage.

Events keep :class:`TensorMeta` in place of tensors, so nothing that typedflops records holds
a user's tensor alive, and an op can be replayed (its backward) or costed symbolically (its
sizes as sympy expressions) from the same description.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

__all__ = [
    "TensorMeta",
    "describe",
    "differentiable",
    "flat_tensors",
    "is_float",
    "nbytes_of",
    "numel",
]

_FLOATING = frozenset(
    d
    for d in vars(torch).values()
    if isinstance(d, torch.dtype) and (d.is_floating_point or d.is_complex)
)


@dataclass(frozen=True)
class TensorMeta:
    """A tensor's shape, strides, dtype, device type and whether it required grad.

    ``shape`` holds ints for a tensor that ran, or sympy expressions when an op is costed
    symbolically; rules read only ``shape``, ``dtype`` and ``requires_grad``.
    """

    shape: tuple[Any, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: str
    requires_grad: bool

    @property
    def itemsize(self) -> int:
        """Bytes per element at this dtype."""
        return self.dtype.itemsize

    def with_shape(self, shape: tuple[Any, ...]) -> TensorMeta:
        """The same description with other (e.g. symbolic) sizes."""
        return TensorMeta(shape, self.stride, self.dtype, self.device, self.requires_grad)


def is_float(meta: TensorMeta) -> bool:
    """Whether the tensor holds floating-point (or complex) values."""
    return meta.dtype in _FLOATING


def differentiable(tensor: torch.Tensor) -> bool:
    """Whether a tensor can require grad: floating-point or complex values."""
    return tensor.is_floating_point() or tensor.is_complex()


def numel(meta: TensorMeta) -> Any:
    """The number of elements (a product of sizes; symbolic when the sizes are)."""
    count: Any = 1
    for size in meta.shape:
        count = count * size
    return count


def nbytes_of(meta: TensorMeta) -> int:
    """Bytes of the elements at the tensor's dtype."""
    return int(numel(meta)) * _ITEMSIZE[meta.dtype]


_ITEMSIZE: dict[torch.dtype, int] = {}


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_LAZY = (UninitializedParameter, UninitializedBuffer)


def _describe_tensor(tensor: torch.Tensor) -> TensorMeta:
    if type(tensor) not in _PLAIN and isinstance(tensor, _LAZY):
        # a lazy layer's weight before its first call initializes it (no shape to read)
        size = tuple(tensor.size())
        return TensorMeta(size, (1,) * len(size), tensor.dtype, tensor.device.type, False)
    dtype = tensor.dtype
    if dtype not in _ITEMSIZE:
        _ITEMSIZE[dtype] = tensor.element_size()
    layout_ok = tensor.layout is torch.strided and not tensor.is_nested
    key = (
        tuple(int(s) for s in tensor.shape) if layout_ok else _nested_shape(tensor),
        tuple(tensor.stride()) if layout_ok else (),
        dtype,
        tensor.device.type,
        tensor.requires_grad,
    )
    found = _KNOWN.get(key)
    if found is None:
        if len(_KNOWN) >= _KNOWN_MOST:
            _KNOWN.clear()
        found = _KNOWN[key] = TensorMeta(*key)
    return found


# Descriptions are values (frozen, compared by their fields): one object per distinct
# description, shared by every event that saw a tensor of it, so that a dry run of a deep
# model keeps a handful of them, not one per tensor per op. (Bounded: a process that sees
# ever new shapes starts over.)
_KNOWN: dict[tuple[Any, ...], TensorMeta] = {}
_KNOWN_MOST = 65536


def _nested_shape(tensor: torch.Tensor) -> tuple[int, ...]:
    # A jagged or sparse tensor: its values' element count as one axis, so that rules that
    # count elements count the ones that exist (COO keeps them in `_values()`, the
    # compressed layouts, CSR, CSC, BSR and BSC, in `values()`); another layout (mkldnn)
    # has its shape.
    if tensor.is_nested or tensor.layout in _COMPRESSED:
        return (int(tensor.values().numel()),)
    if tensor.layout is torch.sparse_coo:
        return (int(tensor._values().numel()),)
    return tuple(int(s) for s in tensor.shape)


_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)


def describe(value: Any) -> Any:
    """``value`` with every tensor replaced by its :class:`TensorMeta`; lists become tuples
    and dicts sorted tuples of pairs, so that the result is hashable."""
    if isinstance(value, torch.Tensor):
        return _describe_tensor(value)
    if isinstance(value, list | tuple):
        return tuple(describe(item) for item in value)
    if isinstance(value, dict):
        return tuple((key, describe(value[key])) for key in sorted(value))
    return value


def flat_tensors(tree: Any) -> list[TensorMeta]:
    """Every :class:`TensorMeta` in a described tree, in order."""
    found: list[TensorMeta] = []
    _visit(tree, found)
    return found


def _visit(value: Any, found: list[TensorMeta]) -> None:
    # (a function of the module's, not a closure: a closure that calls itself is a cycle,
    # garbage only the collector frees, made twice per op of a dry run)
    if isinstance(value, TensorMeta):
        found.append(value)
    elif isinstance(value, tuple):
        for item in value:
            _visit(item, found)


def map_meta(tree: Any, convert: Callable[[TensorMeta], Any]) -> Any:
    """``tree`` with each :class:`TensorMeta` replaced by ``convert(meta)``."""
    if isinstance(tree, TensorMeta):
        return convert(tree)
    if isinstance(tree, tuple):
        return tuple(map_meta(item, convert) for item in tree)
    return tree
