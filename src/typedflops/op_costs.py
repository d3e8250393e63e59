"""Cost rules of the wrapped einops ops, as numbers and as formulas in the call's dim names.

Conventions (SPEC §3; the same as ``torch.utils.flop_counter.FlopCounterMode`` where both
count):

- einsum, per contraction step over an iteration space of N points (the product of the
  sizes of every distinct axis of its operands):

  * two or more operands and some axis summed: 2·N (a matmul is 2·m·n·k);
  * two or more operands and nothing summed (elementwise or outer product): N;
  * one operand and some axis summed (``"i j -> i"``, a trace ``"i i ->"``): N, a reduction;
  * one operand and nothing summed (a transpose or diagonal): 0, a view or a copy.

  A 3+ operand einsum is counted step by step along the pairwise order it ran in.
  Backward: a step with 2+ operands adds its forward count again for each of its operands
  that requires grad (2·N per operand for a contraction, FlopCounterMode's count of the
  grad matmuls; N per operand for a product); a single-operand step's backward is a
  broadcast and costs 0.
- reduce: one op per input element when some axis is reduced; ``mean`` adds one divide per
  output element. Backward (input requires grad): ``sum`` 0 (a broadcast), ``mean`` one
  divide per input element, ``min``/``max``/a callable one compare-select per input element,
  ``prod`` two ops per input element (``grad * out / x``), ``any``/``all`` none.
- rearrange and repeat: 0 FLOPs. repeat's backward sums the copies: one op per output
  element when it added axes and the input requires grad.
- bytes: inputs read once and the output written once at their dtypes; an op whose result
  shares storage with its input (a view) moves 0 bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import sympy
import torch

from .cost import OpCost
from .expr import dim_symbol
from .patterns import EinsumLayout, TransformLayout, TransformPlan
from .recording import Node

__all__ = [
    "contraction_cost",
    "einsum_cost",
    "einsum_terms",
    "is_view",
    "tensor_bytes",
    "transform_cost",
]


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes of a tensor's elements at its dtype (``numel * element_size``)."""
    return tensor.numel() * tensor.element_size()


def is_view(result: torch.Tensor, source: torch.Tensor) -> bool:
    """Whether ``result`` shares storage with ``source``.

    ``torch._C._is_alias_of`` compares storages, so it also answers on ``meta`` tensors,
    whose data pointers are all 0.
    """
    return result is source or bool(torch._C._is_alias_of(result, source))  # type: ignore[attr-defined]


def _named_term(node: Node, name: str, size: int, term: sympy.Expr) -> sympy.Expr:
    # A number where the pattern names a dim of the call at that size: the name is better.
    if term.is_Integer and node.dims.get(name) == size and not name.startswith("\u2026"):
        return dim_symbol(name)
    return term


def einsum_terms(
    node: Node, tensors: Sequence[torch.Tensor], layout: EinsumLayout
) -> dict[str, sympy.Expr]:
    """The term of every axis: from the first operand where it has its full (unbroadcast) size."""
    terms: dict[str, sympy.Expr] = {}
    sizes = layout.axis_sizes
    for tensor, axes in zip(tensors, layout.operand_axes, strict=True):
        symbols = node.shape_symbols(tensor)
        for axis, term, size in zip(axes, symbols, tensor.shape, strict=True):
            if axis not in terms and size == sizes[axis]:
                terms[axis] = _named_term(node, axis, size, term)
    return terms


def contraction_cost(
    inputs: Sequence[Sequence[str]],
    output: Sequence[str],
    sizes: Mapping[str, int],
    terms: Mapping[str, sympy.Expr],
    grads: Sequence[bool],
) -> tuple[int, sympy.Expr, int, sympy.Expr]:
    """Forward and backward FLOPs (counts and formulas) of one einsum step."""
    space = list(dict.fromkeys(axis for axes in inputs for axis in axes))
    points = math.prod(sizes[axis] for axis in space)
    formula = sympy.Mul(*(terms.get(axis, sympy.Integer(sizes[axis])) for axis in space))
    summed = not set(space) <= set(output)
    if len(inputs) == 1:
        return (
            (points, formula, 0, sympy.Integer(0))
            if summed
            else (0, sympy.Integer(0), 0, sympy.Integer(0))
        )
    factor = 2 if summed else 1
    needing = sum(grads)
    return (
        factor * points,
        factor * formula,
        needing * factor * points,
        needing * factor * formula,
    )


def einsum_cost(
    node: Node,
    pattern: str,
    tensors: Sequence[torch.Tensor],
    layout: EinsumLayout,
    result: torch.Tensor,
    op: str = "einsum",
) -> OpCost:
    """The cost of an einsum as it ran (pairwise steps for 3+ operands) and its output terms.

    Sets the output's terms in ``node`` so later ops keep the names.
    """
    sizes = layout.axis_sizes
    terms = einsum_terms(node, tensors, layout)
    grads = [t.requires_grad for t in tensors]
    if not layout.steps:
        flops, formula, backward, backward_formula = contraction_cost(
            layout.operand_axes, layout.output_axes, sizes, terms, grads
        )
        read = sum(tensor_bytes(t) for t in tensors)
    else:
        flops, backward, read = 0, 0, 0
        formula = backward_formula = sympy.Integer(0)
        # Operand bytes: the originals at their own dtype, intermediates at the result's.
        nbytes: list[int] = [tensor_bytes(t) for t in tensors]
        itemsize = result.element_size()
        for step, (inputs, output) in zip(layout.steps, layout.step_axes, strict=True):
            step_grads = [grads[i] for i in step.operands]
            f, ff, b, bf = contraction_cost(inputs, output, sizes, terms, step_grads)
            flops, formula = flops + f, formula + ff
            backward, backward_formula = backward + b, backward_formula + bf
            read += sum(nbytes[i] for i in step.operands)
            for i in sorted(step.operands, reverse=True):
                del grads[i], nbytes[i]
            grads.append(any(step_grads))
            nbytes.append(math.prod(sizes[a] for a in output) * itemsize)
    output_terms = [terms.get(axis, sympy.Integer(sizes[axis])) for axis in layout.output_axes]
    node.set_shape_symbols(result, output_terms)
    written = tensor_bytes(result)
    if layout.steps:
        written = sum(math.prod(sizes[a] for a in out) for _, out in layout.step_axes)
        written *= result.element_size()
    return OpCost(
        op=op,
        pattern=pattern,
        flops=flops,
        formula=sympy.expand(formula),
        backward_flops=backward,
        backward_formula=sympy.expand(backward_formula),
        bytes_read=read,
        bytes_written=written,
    )


def _transform_terms(
    node: Node,
    tensor: torch.Tensor,
    plan: TransformPlan,
    layout: TransformLayout,
    lengths: Mapping[str, int],
) -> dict[str, sympy.Expr]:
    """Each elementary axis's term; a split axis ``(h d)`` divides its term by the known parts."""
    sizes = layout.sizes
    terms: dict[str, sympy.Expr] = {}

    def known(axis: str) -> sympy.Expr:
        if axis in plan.numbered:
            return sympy.Integer(plan.numbered[axis])
        return _named_term(node, axis, sizes[axis], sympy.Integer(sizes[axis]))

    for group, term in zip(plan.input_groups, node.shape_symbols(tensor), strict=True):
        if len(group) == 1:
            terms[group[0]] = _named_term(node, group[0], sizes[group[0]], term)
            continue
        unknown = [axis for axis in group if axis not in lengths and axis not in plan.numbered]
        for axis in group:
            if axis not in unknown:
                terms[axis] = known(axis)
        if unknown:
            rest = sympy.Mul(*(terms[axis] for axis in group if axis not in unknown))
            terms[unknown[0]] = _named_term(
                node, unknown[0], sizes[unknown[0]], sympy.cancel(term / rest)
            )
    for group in plan.output_groups:
        for axis in group:
            if axis not in terms:
                terms[axis] = known(axis)
    return terms


def transform_cost(
    node: Node,
    op: str,
    plan: TransformPlan,
    layout: TransformLayout,
    lengths: Mapping[str, int],
    tensor: torch.Tensor,
    result: torch.Tensor,
    reduction: str,
) -> OpCost:
    """The cost of a rearrange/reduce/repeat as it ran, and its output terms."""
    terms = _transform_terms(node, tensor, plan, layout, lengths)
    output_terms = [sympy.Mul(*(terms[a] for a in group)) for group in plan.output_groups]
    node.set_shape_symbols(result, output_terms)
    zero = sympy.Integer(0)
    flops, formula, backward, backward_formula = 0, zero, 0, zero
    input_points = tensor.numel()
    input_formula = sympy.Mul(*node.shape_symbols(tensor))
    output_formula = sympy.Mul(*output_terms)
    grad = tensor.requires_grad
    if plan.reduced:
        flops, formula = input_points, input_formula
        if reduction == "mean":
            flops, formula = flops + result.numel(), formula + output_formula
        per_input = {"sum": 0, "any": 0, "all": 0, "prod": 2}.get(reduction, 1)
        if grad and per_input:
            backward, backward_formula = per_input * input_points, per_input * input_formula
    elif plan.added and grad:
        backward, backward_formula = result.numel(), output_formula
    view = is_view(result, tensor)
    return OpCost(
        op=op,
        pattern=plan.pattern,
        flops=flops,
        formula=sympy.expand(formula),
        backward_flops=backward,
        backward_formula=sympy.expand(backward_formula),
        bytes_read=0 if view else tensor_bytes(tensor),
        bytes_written=0 if view else tensor_bytes(result),
        view=view,
    )
