"""The FLOP rules of the kernels optimizers run: torch's ``_foreach_*`` ops and the fused
steps (``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_``). The conventions they follow are
written in :mod:`.rules`.

A ``_foreach_*`` op is its per-tensor op run on each tensor of its lists (``_foreach_mul_``
is a ``mul_`` per parameter), counted by that op's rule and summed: an ``add`` one FLOP per
element (2 with an ``alpha`` other than 1), ``addcmul``/``addcdiv`` 2, ``lerp`` 3, complex
values as :mod:`.pointwise_rules` counts them; ``_foreach_norm`` a vector norm per tensor
(2 per element, 1 per tensor), ``_foreach_powsum`` the same without the root, ``_foreach_max``
a compare per element. Where ``torch.optim``'s ``foreach=True`` path runs the arithmetic of
its ``foreach=False`` path, one list at a time rather than one tensor at a time (SGD, Adam,
AdamW, RMSprop, NAdam, Adamax, Adadelta), the two count alike; where it runs other ops
(Adagrad's, RAdam's, ASGD's), each counts what it runs. Copies and zeros
(``_foreach_copy_``, ``_foreach_zero_``) cost 0.

A fused step runs, per element, the ops of the step it fuses (its kernel's comments name
them) and is counted as those ops are, so that ``fused=True`` counts what ``foreach=True``
does. Adam: ``lerp`` (3), ``mul`` (1), ``addcmul`` (2), ``sqrt``, divide and add (3),
``addcdiv`` (2): 11 per element; AdamW's decay a multiply more, Adam's ``weight_decay`` an
add scaled by it (2, 1 at a decay of 1), ``maximize`` a negation, ``amsgrad`` a maximum and
a gradient scale (``grad_scale``) a divide. SGD: the update ``p - lr·g`` (2), ``weight_decay``
2, momentum after the first step ``buf·m`` and an add (2, 3 with ``dampening``),
``nesterov`` ``g + m·buf`` (2), ``maximize`` 1, ``grad_scale`` 1. A step given ``found_inf``
runs or not by that tensor's value: it is listed as uncounted, and so is ``_fused_adagrad_``
(its two unfused paths differ: no one count to mirror).
"""

from __future__ import annotations

from typing import Any

import torch

from .opcall import OpCall, Rule
from .pointwise_rules import pointwise, reduction, words
from .tensors import TensorMeta, is_float, numel

__all__ = ["optimizer_rules"]

aten = torch.ops.aten

#: The pointwise ops with a ``_foreach_`` form (and its in-place form, ``_foreach_add_``).
_POINTWISE = words(
    """
    abs acos asin atan ceil cos cosh erf erfc exp expm1 floor frac lgamma log log10 log1p log2
    neg reciprocal round rsqrt sigmoid sign sin sinh sqrt tan tanh trunc
    add sub mul div clamp_max clamp_min maximum minimum pow lerp addcdiv addcmul
    """
)


def _is_list(value: Any) -> bool:
    return isinstance(value, tuple) and any(isinstance(item, TensorMeta) for item in value)


def _parts(call: OpCall, name: str) -> list[OpCall]:
    """The per-tensor calls a ``_foreach_`` call stands for: each list argument's i-th item
    (tensors, or numbers of a scalar list), the other arguments as they are."""
    lists = [value for value in (*call.args, *call.kwargs.values()) if _is_list(value)]
    if not lists:
        return []
    count = len(lists[0])

    def item(value: Any, index: int) -> Any:
        return value[index] if isinstance(value, tuple) and len(value) == count else value

    outputs = call.out if _is_list(call.out) and len(call.out) == count else lists[0]
    return [
        OpCall(
            name,
            tuple(item(value, index) for value in call.args),
            {key: item(value, index) for key, value in call.kwargs.items() if key != "out"},
            outputs[index],
        )
        for index in range(count)
    ]


def _foreach(name: str, rule: Rule) -> Rule:
    def each(call: OpCall) -> Any:
        total: Any = 0
        for part in _parts(call, name):
            total = total + rule(part)
        return total

    return each


def _powsum(call: OpCall) -> Any:
    """A vector norm without its root: 2 per element (complex 4)."""
    return reduction(call) - numel(call.output) if is_float(call.inputs[0]) else 0


def _scaled(alpha: Any) -> int:
    """An add that scales its second operand (``add(x, y, alpha=a)``): 2, 1 where ``a`` is 1."""
    return 1 if alpha == 1 else 2


def _elements(call: OpCall) -> Any:
    """The floating-point parameters' elements a fused step updates."""
    if call.kwargs.get("found_inf") is not None:
        raise ValueError("a fused step given found_inf runs or not by its value")
    total: Any = 0
    for param in call.args[0]:
        if is_float(param):
            total = total + numel(param)
    return total


def _common(call: OpCall) -> int:
    """``maximize``'s negation and ``grad_scale``'s divide, per element."""
    return bool(call.kwargs.get("maximize")) + (call.kwargs.get("grad_scale") is not None)


def _fused_adam(decoupled: bool) -> Rule:
    def rule(call: OpCall) -> Any:
        elements = _elements(call)
        per_element = 11 + _common(call) + bool(call.kwargs.get("amsgrad"))
        decay = call.kwargs.get("weight_decay", 0)
        if decay != 0:
            per_element += 1 if decoupled else _scaled(decay)
        return per_element * elements

    return rule


def _fused_sgd(call: OpCall) -> Any:
    elements = _elements(call)
    kwargs = call.kwargs
    lr: Any = kwargs.get("lr", 0)
    per_element = _common(call) + (2 if isinstance(lr, TensorMeta) else _scaled(-lr))
    decay = kwargs.get("weight_decay", 0)
    if decay != 0:
        per_element += _scaled(decay)
    momentum = kwargs.get("momentum", 0)
    if momentum != 0:
        if not kwargs.get("is_first_step"):
            per_element += 1 + _scaled(1 - kwargs.get("dampening", 0))
        if kwargs.get("nesterov"):
            per_element += _scaled(momentum)
    return per_element * elements


def optimizer_rules() -> dict[Any, Rule]:
    """The rules of this module, by the op each counts."""
    rules: dict[Any, Rule] = {}
    for name in sorted(_POINTWISE):
        for form in (name, f"{name}_"):
            packet = getattr(aten, f"_foreach_{form}", None)
            if packet is not None:
                rules[packet] = _foreach(form, pointwise)
    named = {"norm": reduction, "max": reduction, "powsum": _powsum}
    for name, rule in named.items():
        packet = getattr(aten, f"_foreach_{name}", None)
        if packet is not None:
            rules[packet] = _foreach("norm" if name == "powsum" else name, rule)
    for name, fused in (
        ("_fused_adam_", _fused_adam(False)),
        ("_fused_adamw_", _fused_adam(True)),
        ("_fused_sgd_", _fused_sgd),
    ):
        packet = getattr(aten, name, None)
        if packet is not None:
            rules[packet] = fused
    return rules
