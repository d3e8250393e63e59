"""Where a CPU's ``scatter_reduce`` runs its kernel for an expanded index, and how many rows
that index reaches.

torch (``TensorAdvancedIndexing.cpp``, ``can_use_expanded_index_path``) sends
``scatter_reduce`` to ``cpu_scatter_reduce_expanded_index`` (``ScatterGatherKernel.cpp``)
when: the tensors are on a CPU, floating point and not empty, torch was built with FBGEMM's
radix sort (and OpenMP), ``dim`` is 0, the index (nnz, *rest) has stride 1 along dim 0 and
is expanded along the rest (stride 0, or 1 over a dim of size 1), ``src`` matches it past
dim 0, K = numel(index) / nnz is at least 16, and ``src`` and the output are contiguous.
That kernel sorts the index (integer work), reduces each source row into its row of the
output (an op per value, as the general kernel) and, for a mean, divides each row it
reached by that row's count; the general kernel's count tensor (an add per value, a
compare and a divide per output element) is not made.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensor

from ...errors import NotPolynomial
from .opcall import OpCall
from .standing import stands_for
from .tensors import TensorMeta

__all__ = ["ExpandedRows", "takes_expanded_path"]

#: Whether this torch sorts with FBGEMM's OpenMP radix sort (the path needs it).
RADIX_SORT = (
    "fbgemm" in torch.backends.quantized.supported_engines and torch.backends.openmp.is_available()  # type: ignore[no-untyped-call]
)

_THRESHOLD = 16  # (K below it: the general kernel)


def takes_expanded_path(call: OpCall) -> bool:
    """Whether ``scatter_reduce(self, dim, index, src)`` runs the expanded-index kernel (see
    the module); a tensor on ``meta`` as on the device the dry run stands for. Raises
    :class:`NotPolynomial` where that depends on a size given as a formula (K against 16)."""
    self_, index, src = call.args[0], call.args[2], call.args[3]
    if not RADIX_SORT or _device(self_) != "cpu" or not self_.dtype.is_floating_point:
        return False
    ranks = len(self_.shape), len(index.shape), len(src.shape)
    if 0 in ranks or int(call.arg(1, "dim")) % ranks[0] != 0:
        return False
    if any(_zero(math.prod(t.shape)) for t in (self_, index, src)):
        return False
    if any(src.shape[d] != index.shape[d] for d in range(1, ranks[1])):
        return False
    past = zip(index.stride[1:], index.shape[1:], strict=True)
    if index.stride[0] != 1 or not all(s == 0 or (s == 1 and size == 1) for s, size in past):
        return False
    if not (_contiguous(src) and _contiguous(call.output)):
        return False
    short = sympy.sympify(math.prod(index.shape[1:]) - _THRESHOLD).is_negative
    if short is None:
        raise NotPolynomial(f"{call.name}: its kernel depends on whether K < {_THRESHOLD}")
    return not short


def _device(meta: TensorMeta) -> str:
    return (stands_for() or "meta") if meta.device == "meta" else meta.device


def _zero(size: Any) -> bool:
    return isinstance(size, int) and size == 0


def _contiguous(meta: TensorMeta) -> bool:
    """Whether the strides are a contiguous tensor's (dims of size 1 pass over); with sizes
    as formulas, whether they fall in order to 1 (a check the count at the run's own sizes
    then confirms)."""
    sized = list(zip(meta.shape, meta.stride, strict=True))
    sized = [(size, stride) for size, stride in sized if size != 1]
    if all(isinstance(size, int) for size, _ in sized):
        expected = 1
        for size, stride in reversed(sized):
            if stride != expected:
                return False
            expected *= size
        return True
    strides = [stride for _, stride in sized]
    return not strides or (strides[-1] == 1 and strides == sorted(strides, reverse=True))


class ExpandedRows:
    """The rows a ``scatter_reduce`` mean's expanded index reaches (R, read from the values
    of a real run's index), which set its divides; on tensors without values every row of
    ``self`` is taken as reached (an upper bound), and the Cost says so."""

    note = "scatter_reduce: every row of self counted as reached by the index (a mean's divides)"

    def rows(self, args: Sequence[Any], kwargs: Any) -> int | None:
        """R for a mean along dim 0 with an index expanded past it; None otherwise or
        without values."""
        index = self._index(args, kwargs)
        if index is None or index.is_meta or isinstance(index, FakeTensor):
            return None
        return int(torch.unique(index.reshape(index.shape[0], -1)[:, 0]).numel())

    def _index(self, args: Sequence[Any], kwargs: Any) -> torch.Tensor | None:
        """The index of a mean along dim 0 expanded past it, else None."""
        reduce = args[4] if len(args) > 4 else kwargs.get("reduce")
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        index = args[2] if len(args) > 2 else kwargs.get("index")
        if reduce != "mean" or not isinstance(index, torch.Tensor) or index.dim() == 0:
            return None
        if index.numel() == 0 or int(dim) % index.dim() != 0 or index.stride(0) != 1:
            return None
        return index if all(s in (0, 1) for s in index.stride()[1:]) else None

    def key(self, args: Sequence[Any], kwargs: Any) -> int | None:
        """What the values make the op run, as part of its key (see :mod:`.opkeys`)."""
        return self.rows(args, kwargs)

    def counter(self, rule: Any) -> Any:
        """The count of a call that ran by ``rule`` given R; None where not known."""

        def ran(call: Any, args: Sequence[Any], kwargs: Any) -> Any:
            rows = self.rows(args, kwargs)
            return None if rows is None else rule(call, rows)

        return ran

    def unknown(self, args: Sequence[Any], kwargs: Any) -> str | None:
        """:attr:`note` where such an index has no values and the kernel is the expanded
        one's; else None."""
        index = self._index(args, kwargs)
        if index is None or not (index.is_meta or isinstance(index, FakeTensor)):
            return None
        self_, src = args[0], args[3] if len(args) > 3 else kwargs.get("src")
        device = stands_for() if self_.is_meta else self_.device.type
        wide = index.numel() // index.shape[0] >= _THRESHOLD
        taken = RADIX_SORT and device == "cpu" and wide and src.is_contiguous()
        return self.note if taken and self_.is_floating_point() else None
