"""Collectives as a rank issues them: their kind, their buffer's bytes, their group.

torch issues collectives as dispatcher ops, ``c10d.*`` (process-group calls: FSDP's
all-gathers and reduce-scatters, ``dist.all_reduce``, pipeline sends and receives) and
``_c10d_functional.*`` (DTensor's redistributions), so a dispatch mode sees each one with
its tensors and its process group.

A collective's *buffer* is the whole tensor it works on: what an all-reduce reduces, what
an all-gather gathers (its output), what a reduce-scatter scatters (its input), what a send
or a receive moves. What each rank puts on the wire, in the ring algorithms NCCL uses
(``bus`` bytes, as ``nccl-tests`` counts them), is ``2(n-1)/n`` of the buffer for an
all-reduce (a reduce-scatter, then an all-gather), ``(n-1)/n`` for an all-gather or a
reduce-scatter, and the buffer for a send, a receive or a broadcast.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

__all__ = ["KINDS", "buffer_bytes", "bus_fraction", "collective_kind", "group_name"]

_c10d = torch.ops.c10d
_functional = torch.ops._c10d_functional

#: Each collective op's kind.
KINDS: dict[Any, str] = {
    _c10d.allreduce_: "all_reduce",
    _c10d.allreduce_coalesced_: "all_reduce",
    _functional.all_reduce: "all_reduce",
    _functional.all_reduce_: "all_reduce",
    _functional.all_reduce_coalesced: "all_reduce",
    _c10d._allgather_base_: "all_gather",
    _c10d.allgather_: "all_gather",
    _c10d.allgather_into_tensor_coalesced_: "all_gather",
    _functional.all_gather_into_tensor: "all_gather",
    _functional.all_gather_into_tensor_coalesced: "all_gather",
    _c10d._reduce_scatter_base_: "reduce_scatter",
    _c10d.reduce_scatter_: "reduce_scatter",
    _c10d.reduce_scatter_tensor_coalesced_: "reduce_scatter",
    _functional.reduce_scatter_tensor: "reduce_scatter",
    _functional.reduce_scatter_tensor_coalesced: "reduce_scatter",
    _c10d.broadcast_: "broadcast",
    _functional.broadcast: "broadcast",
    _c10d.alltoall_base_: "all_to_all",
    _functional.all_to_all_single: "all_to_all",
    _c10d.send: "send",
    _c10d.recv_: "recv",
}


def collective_kind(func: Any) -> str | None:
    """The kind of a dispatched op if it is a collective (``"all_reduce"``...), else None."""
    return KINDS.get(getattr(func, "_overloadpacket", None))


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [value for value in tree_flatten(tree)[0] if isinstance(value, torch.Tensor)]


def buffer_bytes(func: Any, kind: str, args: Any, kwargs: Any, out: Any) -> int:
    """The bytes of a collective's buffer (see the module's doc): a gather's output, a
    scatter's input (every tensor of a coalesced call), any other collective's tensors.

    >>> gather = torch.ops.c10d._allgather_base_.default
    >>> buffer_bytes(gather, "all_gather", (torch.empty(8), torch.empty(2)), {}, None)
    32
    """
    functional = getattr(func, "namespace", "") == "_c10d_functional"
    if kind == "all_gather":
        whole: Any = out if functional else args[0]
    elif kind == "reduce_scatter":
        whole = args[0] if functional else args[1]
    else:
        whole = (args, kwargs)
    return sum(_size(t) for t in _tensors(whole))


def _size(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def group_name(args: Any, kwargs: Any) -> str:
    """The name of the process group a collective runs on: ``c10d`` ops take the group
    itself, functional ones its name (their last string argument)."""
    values = tree_flatten((args, kwargs))[0]
    for value in values:
        if isinstance(value, torch.ScriptObject):
            try:
                return str(torch.distributed.ProcessGroup.unbox(value).group_name)
            except RuntimeError:  # another custom class (a ReduceOp)
                continue
    names = [value for value in values if isinstance(value, str)]
    return names[-1] if names else ""


def bus_fraction(kind: str, ranks: int) -> Fraction:
    """The share of a collective's buffer each of ``ranks`` ranks sends, ring algorithms.

    >>> bus_fraction("all_reduce", 8), bus_fraction("all_gather", 8), bus_fraction("send", 2)
    (Fraction(7, 4), Fraction(7, 8), Fraction(1, 1))
    """
    if ranks <= 1 and kind not in ("send", "recv"):
        return Fraction(0)
    if kind == "all_reduce":
        return Fraction(2 * (ranks - 1), ranks)
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return Fraction(ranks - 1, ranks)
    return Fraction(1)
