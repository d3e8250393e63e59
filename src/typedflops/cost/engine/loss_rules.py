"""The FLOP rules of fused loss kernels and their backward kernels: mean squared error,
Huber and smooth L1, binary cross-entropy (on probabilities and on logits), soft margin,
multi-class margin. The conventions they follow are written in :mod:`.rules`; the losses
torch composes of other ops (L1, KL divergence, cross-entropy's log-softmax) are counted as
those ops.
Connectionist temporal classification (``_ctc_loss``) has no rule: its recursion runs over
each sample's own lengths, values rather than sizes, and it is listed as uncounted; so has
the multi-label margin loss (``multilabel_margin_loss_forward`` and its backward), whose
work per sample runs over the targets before the first ``-1``, a length only the values
tell (its backward is given a meta kernel here, so a replay lists it by its name).

Per element of the input, as the kernels compute it:

- mean squared error: a subtract and a square, 2; its backward ``2/N·(x - y)·grad``, 3.
- Huber: a subtract, an absolute value, a compare and the larger branch (``0.5·z·z`` or
  ``δ·(z - δ/2)``, 2 each), 5; smooth L1 the same with ``0.5·z·z/β`` (3), 6. Their backward:
  a subtract, two compares, the scale and the gradient's product, 5 (smooth L1 a divide by β
  more, 6).
- binary cross-entropy ``(y - 1)·max(log(1 - x), -100) - y·max(log(x), -100)``: 9 (a
  multiply more with ``weight``); its backward ``grad·(x - y)/max((1 - x)·x, ε)``: 6 (a
  multiply more with ``weight``, a divide more for the mean).
- binary cross-entropy on logits ``(1 - y)·x - log_sigmoid(x)``: 4 (``log_sigmoid`` one, as
  an activation); ``pos_weight`` scales the log-sigmoid by ``(p - 1)·y + 1``, 3 more (and a
  subtract per ``pos_weight`` value); ``weight`` a multiply more. Its backward is composed of
  other ops, counted as they run.
- soft margin ``log1p(exp(-x·y))`` (``Loss.cpp``: ``neg``, ``mul_``, ``exp_``, ``log1p_``): 4;
  its backward ``-norm·y·z/(1 + z)·grad`` with ``z = exp(-y·x)``: a negate, a multiply and
  an exponential for ``z``, a multiply by ``y`` and one by ``-norm`` (1 or 1/N, taken for a
  sum too), an add, a divide and the gradient's multiply, 8.

The reduction then adds an add per element (``sum``; ``mean`` a divide more, per output).

Multi-class margin loss (``multi_margin_loss``, N samples of C classes, ``LossMultiMargin.cpp``),
per class other than the target: ``z = margin - x[y] + x[i]`` (2) and a compare; where
``z > 0`` (how many, the values tell: :mod:`.skipped_work`) ``z`` (``p = 2``: squared, 1),
times ``weight[y]`` (1 with ``weight``), added (1); then a divide by C per sample, and the
reduction over the N samples (a single sample's loss is added too). Its backward computes
``z`` for every class (2 per value), and per class other than the target a compare; where
``z > 0`` the gradient ``g`` (``p = 2``: ``2·g·z``, 2), ``weight[y]`` (1) and its subtraction
from the target's gradient (1); then each value times the output's gradient.
"""

from __future__ import annotations

from typing import Any

import torch

from .opcall import OpCall, Rule
from .tensors import is_float, numel

__all__ = ["loss_rules"]

aten = torch.ops.aten

_MEAN, _SUM = 1, 2  # torch's Reduction enum (0: none)


def _reduced(elements: Any, reduction: Any) -> Any:
    """The reduction's adds (and the mean's divide)."""
    if reduction == _SUM:
        return elements
    if reduction == _MEAN:
        return elements + 1
    return 0


def _elementwise_loss(per_element: int, reduction_at: int) -> Rule:
    def rule(call: OpCall) -> Any:
        x = call.inputs[0]
        if not is_float(x):
            return 0
        elements = numel(x)
        return per_element * elements + _reduced(elements, call.arg(reduction_at, "reduction", 1))

    return rule


def _loss_backward(per_element: int) -> Rule:
    def rule(call: OpCall) -> Any:
        x = call.inputs[1]  # (grad_output, input, target, ...)
        return per_element * numel(x) if is_float(x) else 0

    return rule


def _binary_cross_entropy(call: OpCall) -> Any:
    x = call.inputs[0]
    if not is_float(x):
        return 0
    elements = numel(x)
    weighted = call.arg(2, "weight") is not None
    return (9 + weighted) * elements + _reduced(elements, call.arg(3, "reduction", 1))


def _binary_cross_entropy_backward(call: OpCall) -> Any:
    x = call.inputs[1]
    if not is_float(x):
        return 0
    weighted = call.arg(3, "weight") is not None
    mean = call.arg(4, "reduction", 1) == _MEAN
    return (6 + weighted + mean) * numel(x)


def _binary_cross_entropy_with_logits(call: OpCall) -> Any:
    x = call.inputs[0]
    if not is_float(x):
        return 0
    elements = numel(x)
    weight = call.arg(2, "weight")
    pos_weight = call.arg(3, "pos_weight")
    count = (4 + (weight is not None)) * elements
    if pos_weight is not None:
        count += 3 * elements + numel(pos_weight)
    return count + _reduced(elements, call.arg(4, "reduction", 1))


def _soft_margin(call: OpCall) -> Any:
    x = call.inputs[0]
    if not is_float(x):
        return 0
    elements = numel(x)
    return 4 * elements + _reduced(elements, call.arg(2, "reduction", _MEAN))


def _margin_shape(x: Any) -> tuple[Any, Any]:
    """Samples and classes of a multi-margin loss's input (a vector is one sample)."""
    if len(x.shape) == 2:
        return x.shape[0], x.shape[1]
    return 1, (x.shape[0] if x.shape else 1)


def _multi_margin(call: OpCall, met: Any = None) -> Any:
    """``met``: the pairs (sample, class other than its target) whose ``z > 0`` (None: all)."""
    x = call.inputs[0]
    if not is_float(x):
        return 0
    samples, classes = _margin_shape(x)
    pairs = samples * (classes - 1)
    per_met = 1 + (call.arg(2, "p", 1) == 2) + (call.arg(4, "weight") is not None)
    reduction = call.arg(5, "reduction", _MEAN)
    reduced = samples + (reduction == _MEAN) if reduction or len(x.shape) < 2 else 0
    return 3 * pairs + per_met * (pairs if met is None else met) + samples + reduced


def _multi_margin_backward(call: OpCall, met: Any = None) -> Any:
    """``met``: the pairs (sample, class other than its target) whose ``z > 0`` (None: all)."""
    x = call.inputs[1]  # (grad_output, input, target, p, margin, weight, reduction)
    if not is_float(x):
        return 0
    samples, classes = _margin_shape(x)
    pairs = samples * (classes - 1)
    per_met = 1 + 2 * (call.arg(3, "p", 1) == 2) + (call.arg(5, "weight") is not None)
    return 3 * samples * classes + pairs + per_met * (pairs if met is None else met)


def _multi_margin_backward_on_meta(
    grad_output: torch.Tensor, input: torch.Tensor, *rest: Any
) -> torch.Tensor:
    """The input's gradient, as the CPU and GPU kernels give it (torch has no meta kernel:
    a backward replayed on meta needs one)."""
    return torch.empty_like(input, memory_format=torch.contiguous_format)


def _multilabel_margin_backward_on_meta(
    grad_output: torch.Tensor, input: torch.Tensor, *rest: Any
) -> torch.Tensor:
    """The input's gradient of the multi-label margin loss, as the CPU and GPU kernels give
    it (torch has no meta kernel: without one, a backward replayed on meta fails, and the
    op is listed by its failure rather than by its name)."""
    return torch.empty_like(input, memory_format=torch.contiguous_format)


_META_BACKWARDS = {
    "multi_margin_loss_backward": _multi_margin_backward_on_meta,
    "multilabel_margin_loss_backward": _multilabel_margin_backward_on_meta,
}
_LIBRARY: torch.library.Library | None = None
for _name, _kernel in _META_BACKWARDS.items():
    if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{_name}", "Meta"):
        if _LIBRARY is None:
            _LIBRARY = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]
        _LIBRARY.impl(_name, _kernel, "Meta")  # type: ignore[no-untyped-call]


def loss_rules() -> dict[Any, Rule]:
    """The rules of this module, by the op each counts."""
    return {
        aten.mse_loss: _elementwise_loss(2, 2),
        aten.mse_loss_backward: _loss_backward(3),
        aten.huber_loss: _elementwise_loss(5, 2),
        aten.huber_loss_backward: _loss_backward(5),
        aten.smooth_l1_loss: _elementwise_loss(6, 2),
        aten.smooth_l1_loss_backward: _loss_backward(6),
        aten.binary_cross_entropy: _binary_cross_entropy,
        aten.binary_cross_entropy_backward: _binary_cross_entropy_backward,
        aten.binary_cross_entropy_with_logits: _binary_cross_entropy_with_logits,
        aten.soft_margin_loss: _soft_margin,
        aten.soft_margin_loss_backward: _loss_backward(8),
        aten.multi_margin_loss: _multi_margin,
        aten.multi_margin_loss_backward: _multi_margin_backward,
    }
