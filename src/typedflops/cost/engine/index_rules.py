"""The FLOP rules of ops that look up, scatter and count: a loss's picked values,
embedding bags, scatters, ``index_put`` and ``bincount`` (the conventions they follow are
written in :mod:`.rules`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from .expanded_index import takes_expanded_path
from .opcall import OpCall, Rule
from .tensors import is_float, numel

__all__ = [
    "accumulate",
    "bincount",
    "embedding_backward",
    "embedding_bag",
    "embedding_bag_backward",
    "embedding_bag_weights_backward",
    "index_put",
    "index_reduced",
    "index_rules",
    "nll_loss",
    "nll_loss_backward",
    "scatter",
    "scatter_reduced",
    "scattered",
]


def nll_loss(call: OpCall, kept: Any = None) -> Any:
    """A negative log-likelihood: a value picked per target (a divide more, reduced by
    mean); with a ``weight``, a multiply more per target, and for a sum or mean an add of
    the total weight. ``kept``: the targets not equal to ``ignore_index`` (None: all)."""
    target = call.inputs[1]
    reduction = call.arg(3, "reduction", 1)
    weighted = call.arg(2, "weight") is not None
    per_target = 1 + (weighted * (2 if reduction != 0 else 1))
    targets = numel(target) if kept is None else kept
    return per_target * targets + (1 if reduction == 1 else 0)


def nll_loss_backward(call: OpCall, kept: Any = None) -> Any:
    """The output's gradient, negated (and divided by the total weight once for a mean),
    put at each target's place in zeros: a value per target, a multiply more with a
    ``weight``. ``kept``: the targets not equal to ``ignore_index`` (None: all)."""
    values, target = call.arg(1, "self"), call.arg(2, "target")
    if not is_float(values):
        return 0
    weighted = call.arg(3, "weight") is not None
    return (1 + weighted) * (numel(target) if kept is None else kept)


def embedding_backward(call: OpCall, kept: Any = None) -> Any:
    """``embedding_dense_backward`` (gradient (*ids, D), ids): each id's gradient row added
    into its row, an add per value; ``kept``: the ids not equal to ``padding_idx``, whose
    rows alone are added (None: all). With ``scale_grad_by_freq`` the kernel counts each
    id's frequency (integer work), divides 1 by it once per id and multiplies each row by
    that scale: a divide per id and a multiply per value more."""
    grad = call.inputs[0]
    if not is_float(grad):
        return 0
    ids = math.prod(grad.shape[:-1]) if kept is None else kept  # (sizes may be symbols)
    values = ids * grad.shape[-1]
    if not call.arg(4, "scale_grad_by_freq", False):
        return values
    return 2 * values + ids


def accumulate(position: int) -> Rule:
    """An add per value of the argument at ``position`` (a float one: gradients added into
    rows, overlapping patches summed)."""

    def rule(call: OpCall) -> Any:
        values = call.inputs[position]
        return numel(values) if is_float(values) else 0

    return rule


def index_put(call: OpCall) -> Any:
    """An add per value put with ``accumulate=True``; else a copy, 0 FLOPs."""
    adds = call.arg(3, "accumulate", False)
    values = call.inputs[-1]
    return numel(values) if adds and is_float(values) else 0


def embedding_bag(call: OpCall, kept: Any = None) -> Any:
    """A bag's rows summed (mean: and divided; max: compared): an add or compare per value
    looked up, a multiply more per value with ``per_sample_weights`` (table (V, D), ids
    (n,)); ``kept``: the ids not equal to ``padding_idx``, the rows looked up (None: all)."""
    weight, indices = call.inputs[0], call.inputs[1]
    if not is_float(weight):
        return 0
    values = (numel(indices) if kept is None else kept) * weight.shape[1]
    weighted = call.arg(6, "per_sample_weights") is not None
    mean = call.arg(4, "mode", 0) == 1
    return values * (1 + weighted) + (numel(call.output) if mean else 0)


def embedding_bag_backward(mode_at: int, weights_at: int) -> Rule:
    """The bags' gradients added into the rows they looked up: an add per value (mean: a
    divide more; ``per_sample_weights``: a multiply more); max passes each on, 0 FLOPs."""

    def rule(call: OpCall, kept: Any = None) -> Any:
        grad, indices = call.inputs[0], call.inputs[1]
        if not is_float(grad):
            return 0
        values = (numel(indices) if kept is None else kept) * grad.shape[-1]
        mode = call.arg(mode_at, "mode", 0)
        if mode == 2:
            return 0
        weighted = call.arg(weights_at, "per_sample_weights") is not None
        return values * (1 + weighted + (mode == 1))

    return rule


def embedding_bag_weights_backward(call: OpCall, kept: Any = None) -> Any:
    """The gradient of ``per_sample_weights``: per value looked up, its row times its bag's
    gradient, summed (a multiply and an add per coordinate); ``kept``: the ids not equal to
    ``padding_idx`` (None: all)."""
    grad, indices = call.inputs[0], call.inputs[2]
    ids = numel(indices) if kept is None else kept
    return 2 * ids * grad.shape[-1] if is_float(grad) else 0


def scattered(call: OpCall) -> Any:
    """``scatter_add``: an op per index (``src`` may be larger than ``index``: only the
    part ``index`` covers is read)."""
    return numel(call.inputs[1]) if is_float(call.inputs[0]) else 0


def _reduced_by(values_at: int) -> Callable[..., Any]:
    """A reduction into an output by index: an op per value reduced (the tensor input at
    ``values_at``: a sum's add, a product's multiply, a maximum's or minimum's compare); a
    mean then counts its entries as the kernel does (``TensorAdvancedIndexing.cpp``): ones
    added into a count per output element (an add per value), each count compared with 0,
    and each output element divided by its count. Without ``include_self`` the rows are
    first filled (a copy).

    A CPU's ``scatter_reduce`` along dim 0 with an index expanded along its other dims
    (PyG's message passing, :func:`~.expanded_index.takes_expanded_path`) runs another
    kernel (``cpu_scatter_reduce_expanded_index``): the same op per value, and a mean
    divides each of the R rows the index reaches by its own count (K values a row, K =
    numel(index) / index.shape[0]), nothing more: V + R·K. ``rows``: R, read from the
    index's values (None: every row of ``self``, an upper bound)."""

    def rule(call: OpCall, rows: Any = None) -> Any:
        if not is_float(call.inputs[0]):
            return 0
        values = numel(call.inputs[values_at])
        if call.arg(4, "reduce") != "mean":
            return values
        if values_at == 1 and takes_expanded_path(call):
            index = call.inputs[1]
            reached = call.inputs[0].shape[0] if rows is None else rows
            return values + reached * math.prod(index.shape[1:])
        return 2 * values + 2 * numel(call.inputs[0])

    return rule


#: ``scatter_reduce``: a value per index entry, and a mean's divides (above).
scatter_reduced = _reduced_by(1)
#: ``index_reduce`` (self (.., n, ..), index (m,), source (.., m, ..)): a value per source
#: value.
index_reduced = _reduced_by(2)


def scatter(call: OpCall) -> Any:
    """A scatter that reduces (``reduce="add"``/``"multiply"``): an op per index; else a copy."""
    if call.arg(4, "reduce") is None or not is_float(call.inputs[0]):
        return 0
    return numel(call.inputs[1])


def bincount(call: OpCall) -> Any:
    """Counting is integer work; with float ``weights`` an add per weight."""
    weights = call.arg(1, "weights")
    return numel(weights) if weights is not None and is_float(weights) else 0


def index_rules() -> dict[Any, Rule]:
    """The rules of this module, by the op each counts."""
    aten = torch.ops.aten
    rules: dict[Any, Rule] = {}
    for name in ("nll_loss_forward", "nll_loss2d_forward"):
        rules[getattr(aten, name)] = nll_loss
    for name in ("nll_loss_backward", "nll_loss2d_backward"):
        rules[getattr(aten, name)] = nll_loss_backward
    rules[aten.embedding_dense_backward] = embedding_backward
    rules[aten.col2im] = accumulate(0)  # F.fold: overlapping patches summed
    rules[aten.index_add] = accumulate(2)
    rules[aten.scatter_add] = scattered
    rules[aten.scatter_reduce] = scatter_reduced
    rules[aten.scatter] = scatter
    rules[aten.index_reduce] = index_reduced
    rules[aten.index_put] = index_put
    rules[aten._index_put_impl_] = index_put
    rules[aten._embedding_bag] = embedding_bag
    rules[aten._embedding_bag_forward_only] = embedding_bag
    rules[aten._embedding_bag_backward] = embedding_bag_backward(8, 10)
    rules[aten._embedding_bag_dense_backward] = embedding_bag_backward(7, 8)
    rules[aten._embedding_bag_per_sample_weights_backward] = embedding_bag_weights_backward
    rules[aten.bincount] = bincount
    return rules
