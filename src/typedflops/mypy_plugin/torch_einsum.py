"""The ``torch.einsum`` check: a literal equation's grammar, its operand count, each
operand's rank and the dims its letters bind (as for einops' ``einsum``: sizes of 1
broadcast), and the result's dims, checked against the return annotation when returned.

``torch.einsum(equation, *operands)`` and ``torch.einsum(equation, [operands])`` are read;
the sublist form (``einsum(x, [0, 1], y, [1, 2])``) and equations that are not literals
are left alone.
"""

from __future__ import annotations

from mypy.nodes import ARG_POS, CallExpr, Expression, ListExpr, StarExpr, TupleExpr
from mypy.plugin import FunctionContext
from mypy.types import Type

from ..syntax import Problem
from ..syntax.equations import check_equation_operands, torch_equation
from . import codes
from .einops_ops import contract
from .report import keep, literal_str, report

__all__ = ["torch_einsum_hook"]


def _operands(call: CallExpr) -> list[Expression] | None:
    """The operand expressions, or None when how many there are is not known."""
    rest = call.args[1:]
    if any(kind != ARG_POS for kind in call.arg_kinds[1:]):
        return None  # *tensors
    if len(rest) == 1 and isinstance(rest[0], (ListExpr, TupleExpr)):
        items = rest[0].items
        return None if any(isinstance(item, StarExpr) for item in items) else list(items)
    return list(rest)


def torch_einsum_hook(ctx: FunctionContext) -> Type:
    """``torch.einsum(equation, *operands)``: as :func:`.einops_ops.einsum_hook`."""
    call = ctx.context
    if not isinstance(call, CallExpr) or not call.args or call.arg_kinds[0] != ARG_POS:
        return keep(ctx, None)
    equation = literal_str(call.args[0])
    if equation is None:
        return keep(ctx, None)
    where = f'torch.einsum "{equation}"'
    operands = _operands(call)
    try:
        parsed = torch_equation(equation)
        if operands is not None:
            check_equation_operands(parsed, len(operands))
    except Problem as problem:
        report(ctx.api, f"{where}: {problem.reason}", call, codes.PATTERN)
        return keep(ctx, None)
    if operands is None:
        return keep(ctx, None)
    return contract(ctx, where, "torch.einsum", parsed.operands, parsed.output, operands)
