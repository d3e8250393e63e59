"""The FLOP rules of pointwise ops and reductions, on real and on complex values (the
conventions they follow are written in :mod:`.rules`).

A complex value is a pair of reals, and its arithmetic is counted in real FLOPs: an add or
subtract is 2, a multiply 6 (four products, an add and a subtract), a divide 11 (the
denominator's |z|² in 3, the numerator's product by the conjugate in 6, and 2 divides),
``abs`` 4 (two squares, an add, a square root); the fused ops are their parts (``addcmul``
14, ``addcdiv`` 19, ``lerp`` 10). Every other function of a complex value (``exp``,
``sigmoid``) counts as the real convention does, once per part: 2 per element. A reduction
over complex values counts its adds twice (``sum`` 2 per element, ``mean`` 2 more per
output), a product 6 per element, a vector norm 4 (|z|² and an add). Torch computes an op on
a complex and a real operand at the complex dtype, so the complex count is what runs.
Kernels that compose a few of these inside one op (``trace``, ``linalg_cross``, ``dist``,
``polar``) are counted as their parts (:func:`composed_rules`).
"""

from __future__ import annotations

from typing import Any

import torch

from .opcall import OpCall, Rule
from .tensors import TensorMeta, flat_tensors, is_float, numel

__all__ = [
    "NOT_ARITHMETIC",
    "composed_rules",
    "is_complex",
    "per_element",
    "pointwise",
    "reduction",
    "words",
]

_POINTWISE_COST = {"addcmul": 2, "addcdiv": 2, "lerp": 3}

#: Ops whose ``alpha`` scales their second operand first (``x + alpha * y``).
_SCALED = frozenset({"add", "sub", "rsub"})

_COMPLEX_POINTWISE_COST = {
    "mul": 6,
    "div": 11,
    "true_divide": 11,
    "reciprocal": 5,  # the conjugate over |z|²: 2 products, an add, 2 divides
    "abs": 4,
    "addcmul": 14,  # a complex product, a product by the value, an add
    "addcdiv": 19,  # a complex divide, a product by the value, an add
    "lerp": 10,  # a subtract, a complex product, an add
}


def words(text: str) -> frozenset[str]:
    """A set of op names written as words (easier to read and extend than a list)."""
    return frozenset(text.split())


#: Pointwise-tagged ops that select, copy or generate instead of computing.
NOT_ARITHMETIC = words(
    """
    clone copy where masked_fill fill zero detach alias lift_fresh lift_fresh_copy _to_copy to
    bernoulli uniform normal exponential geometric cauchy log_normal random
    native_dropout_backward_mask isnan isinf isfinite isposinf isneginf isreal signbit
    nan_to_num_mask view_as_real view_as_complex conj _conj resolve_conj resolve_neg _neg_view
    """
)


def is_complex(tensors: list[TensorMeta]) -> bool:
    """Whether any of the tensors holds complex values."""
    return any(t.dtype.is_complex for t in tensors)


def _computed(call: OpCall, operands: list[TensorMeta]) -> list[TensorMeta]:
    """The tensors whose dtypes say what an op computes in: its operands and its results
    (integers divided, or given a float ``dtype=``, are computed in floating point: the
    result's dtype), or nothing where no operand is a tensor."""
    return [*operands, *flat_tensors(call.out)] if operands else []


def _base(name: str) -> str:
    """An op's name without the trailing ``_`` of its in-place form (``mul_``: ``mul``)."""
    return name[:-1] if name.endswith("_") and not name.startswith("_") else name


def pointwise(call: OpCall) -> Any:
    """One FLOP per output element (``addcmul``/``addcdiv`` 2, ``lerp`` 3, an add or
    subtract that scales its second operand, ``alpha`` other than 1, 2); complex values in
    real FLOPs (a multiply 6, an add 2). An op on integers with a floating-point result
    (``torch.arange(n) / n``, ``ints.sqrt()``) computes at the result's dtype."""
    computed = _computed(call, call.inputs)
    if not any(is_float(t) for t in computed):
        return 0
    name = _base(call.name)
    complex_values = is_complex(computed)
    table, default = (_COMPLEX_POINTWISE_COST, 2) if complex_values else (_POINTWISE_COST, 1)
    cost = table.get(name, default)
    alpha = call.arg(2, "alpha", 1) if name in _SCALED else 1
    if alpha != 1:
        # the scaling's multiply: a complex value by a real 2, by a complex 6
        cost += (6 if isinstance(alpha, complex) else 2) if complex_values else 1
    if not flat_tensors(call.out):  # (aten.equal answers a bool: it compares its inputs)
        return cost * max(numel(t) for t in call.inputs)
    return cost * numel(call.output)


_REDUCTION_COST: dict[str, tuple[int, int]] = {
    "mean": (1, 1),
    "nanmean": (1, 1),
    "var": (3, 1),
    "std": (3, 2),
    "var_mean": (3, 2),
    "std_mean": (3, 3),
    "linalg_vector_norm": (2, 1),
    "norm": (2, 1),
    "logsumexp": (4, 2),
}

_COMPLEX_REDUCTION_COST: dict[str, tuple[int, int]] = {
    "prod": (6, 0),
    "linalg_vector_norm": (4, 1),
    "norm": (4, 1),
}


def reduction(call: OpCall) -> Any:
    """One FLOP per input element (``mean`` a divide more per output, ``var``/``std`` 3,
    vector norms 2); complex values in real FLOPs (their adds twice, a product 6). Integers
    reduced at a floating-point ``dtype=`` (``ints.sum(dtype=torch.float32)``) are counted at
    it."""
    source = call.inputs[0]
    computed = _computed(call, [source])
    if not any(is_float(t) for t in computed):
        return 0
    name = _base(call.name)
    if is_complex(computed):
        real_input, real_output = _REDUCTION_COST.get(name, (1, 0))
        per_input, per_output = _COMPLEX_REDUCTION_COST.get(name, (2 * real_input, 2 * real_output))
    else:
        per_input, per_output = _REDUCTION_COST.get(name, (1, 0))
    return per_input * numel(source) + per_output * numel(call.output)


def per_element(forward: int) -> Rule:
    """``forward`` FLOPs per element of the first input (twice that on complex values), at
    the result's dtype where that is floating point (``ints.cumsum(0, dtype=torch.float32)``)."""

    def rule(call: OpCall) -> Any:
        source = call.inputs[0]
        computed = _computed(call, [source])
        if not any(is_float(t) for t in computed):
            return 0
        return forward * (2 if is_complex(computed) else 1) * numel(source)

    return rule


def trace(call: OpCall) -> Any:
    """The diagonal's sum: an add per diagonal element (complex: 2)."""
    source = call.inputs[0]
    if not is_float(source):
        return 0
    return (2 if source.dtype.is_complex else 1) * min(source.shape)


def cross(call: OpCall) -> Any:
    """A cross product: per output element two products and a subtract (complex: 14)."""
    if not is_float(call.inputs[0]):
        return 0
    return (14 if is_complex(call.inputs) else 3) * numel(call.output)


def _broadcast_numel(*tensors: TensorMeta) -> Any:
    """The number of elements of the tensors' broadcast shape (a size of 1 takes the
    other's)."""
    rank = max(len(t.shape) for t in tensors)
    count: Any = 1
    for axis in range(1, rank + 1):
        sizes = [t.shape[-axis] for t in tensors if len(t.shape) >= axis]
        wide = [size for size in sizes if size != 1]
        count *= wide[0] if wide else 1
    return count


def dist(call: OpCall) -> Any:
    """``torch.dist(x, y, p)``, ``‖x - y‖_p`` as the kernel computes it: a subtract per
    element of the broadcast difference, then that difference's vector norm (2 per element
    and a root; complex: a subtract 2 and a norm 4 per element)."""
    x, y = call.inputs[0], call.inputs[1]
    if not is_float(x):
        return 0
    elements = _broadcast_numel(x, y)
    return (6 if is_complex(call.inputs) else 3) * elements + 1


def polar(call: OpCall) -> Any:
    """``torch.polar(abs, angle)``, ``abs·cos(angle) + i·abs·sin(angle)``: a cosine, a sine
    and two multiplies per output element."""
    return 4 * numel(call.output) if is_float(call.inputs[0]) else 0


def composed_rules() -> dict[Any, Rule]:
    """The rules of the kernels above that are no plain pointwise op or reduction, by op."""
    aten = torch.ops.aten
    return {aten.trace: trace, aten.linalg_cross: cross, aten.dist: dist, aten.polar: polar}
