"""The FLOP rules of ops that look up, scatter and count: a loss's picked values,
embedding bags, scatters, ``index_put`` and ``bincount`` (the conventions they follow are
written in :mod:`.rules`)."""

from __future__ import annotations

from typing import Any

from .opcall import OpCall, Rule
from .tensors import is_float, numel

__all__ = [
    "accumulate",
    "bincount",
    "embedding_bag",
    "embedding_bag_backward",
    "embedding_bag_weights_backward",
    "index_put",
    "nll_loss",
    "scatter",
    "scattered",
]


def nll_loss(call: OpCall) -> Any:
    """A negative log-likelihood: a value picked per target (a sum more, reduced by mean)."""
    target = call.inputs[1]
    reduction = call.arg(3, "reduction", 1)
    return numel(target) + (1 if reduction == 1 else 0)


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


def embedding_bag(call: OpCall) -> Any:
    """A bag's rows summed (mean: and divided; max: compared): an add or compare per value
    looked up, a multiply more per value with ``per_sample_weights``."""
    weight, indices = call.inputs[0], call.inputs[1]
    if not is_float(weight):
        return 0
    values = numel(indices) * weight.shape[1]
    weighted = call.arg(6, "per_sample_weights") is not None
    mean = call.arg(4, "mode", 0) == 1
    return values * (1 + weighted) + (numel(call.output) if mean else 0)


def embedding_bag_backward(mode_at: int, weights_at: int) -> Rule:
    """The bags' gradients added into the rows they looked up: an add per value (mean: a
    divide more; ``per_sample_weights``: a multiply more); max passes each on, 0 FLOPs."""

    def rule(call: OpCall) -> Any:
        grad, indices = call.inputs[0], call.inputs[1]
        if not is_float(grad):
            return 0
        values = numel(indices) * grad.shape[-1]
        mode = call.arg(mode_at, "mode", 0)
        if mode == 2:
            return 0
        weighted = call.arg(weights_at, "per_sample_weights") is not None
        return values * (1 + weighted + (mode == 1))

    return rule


def embedding_bag_weights_backward(call: OpCall) -> Any:
    """The gradient of ``per_sample_weights``: per value looked up, its row times its bag's
    gradient, summed (a multiply and an add per coordinate)."""
    grad, indices = call.inputs[0], call.inputs[2]
    return 2 * numel(indices) * grad.shape[-1] if is_float(grad) else 0


def scattered(call: OpCall) -> Any:
    """``scatter_add``/``scatter_reduce``: an op per index (``src`` may be larger than
    ``index``: only the part ``index`` covers is read)."""
    return numel(call.inputs[1]) if is_float(call.inputs[0]) else 0


def scatter(call: OpCall) -> Any:
    """A scatter that reduces (``reduce="add"``/``"multiply"``): an op per index; else a copy."""
    if call.arg(4, "reduce") is None or not is_float(call.inputs[0]):
        return 0
    return numel(call.inputs[1])


def bincount(call: OpCall) -> Any:
    """Counting is integer work; with float ``weights`` an add per weight."""
    weights = call.arg(1, "weights")
    return numel(weights) if weights is not None and is_float(weights) else 0
