"""The einops checks: ``einsum``, ``rearrange``, ``reduce``, ``repeat``, ``pack``, ``unpack``
(einops' own and typedflops' wrapped ops), and einops' ``Rearrange``/``Reduce`` layers.

A literal pattern is checked by the grammar core with einops' rules (the same reasons, in
the same words, as typedflops' runtime ``PatternError``), then laid against the arguments'
annotated dims: ranks, fixed sizes, one axis bound to two dims, and the result's dims,
which are checked against the return annotation when the call is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mypy.nodes import (
    ARG_NAMED,
    ARG_POS,
    ARG_STAR2,
    CallExpr,
    Expression,
    IntExpr,
    ListExpr,
    MemberExpr,
    NameExpr,
    TupleExpr,
)
from mypy.plugin import FunctionContext
from mypy.types import Type

from ..syntax import Problem
from ..syntax.patterns import (
    ELLIPSIS,
    Entry,
    Group,
    check_operand_count,
    check_reduction,
    einsum_pattern,
    pack_pattern,
    transform_pattern,
)
from . import codes
from .report import finish, keep, literal_str, report, report_finding
from .scopes import decompositions_before, record_decompositions
from .shapes import Bindings, bind_side, produce
from .static import UNKNOWN, Axis, Dim, Dims, Unknown, Variadic
from .tensors import current_function
from .values import Result, dims_of, record

__all__ = ["contract", "einsum_hook", "layer_hook", "pack_hook", "transform_hook", "unpack_hook"]


def _origin(expr: object, index: int) -> str:
    if isinstance(expr, NameExpr):
        return expr.name
    if isinstance(expr, MemberExpr) and isinstance(expr.expr, NameExpr):
        return f"{expr.expr.name}.{expr.name}"
    return f"operand {index + 1}"


def _bindings(ctx: FunctionContext) -> Bindings:
    function = current_function(ctx.api)
    return Bindings(decompositions_before(function, ctx.context) if function else ())


def _remember(ctx: FunctionContext, bindings: Bindings) -> None:
    function = current_function(ctx.api)
    if function is not None:
        record_decompositions(function, ctx.context, bindings.new_facts)


def einsum_hook(ctx: FunctionContext) -> Type:
    """``einsum(*tensors, pattern)``: pattern syntax, operand count, ranks, bound dims."""
    exprs = [expr for group in ctx.args for expr in group]
    if not exprs or any(kind != ARG_POS for group in ctx.arg_kinds for kind in group):
        return keep(ctx, None)
    pattern = literal_str(exprs[-1])
    if pattern is None:
        return keep(ctx, None)
    where = f'einsum "{pattern}"'
    try:
        parsed = einsum_pattern(pattern)
        check_operand_count(parsed, len(exprs) - 1)
    except Problem as problem:
        report(ctx.api, f"{where}: {problem.reason}", ctx.context, codes.PATTERN)
        return keep(ctx, None)
    return contract(ctx, where, "einsum", parsed.operands, parsed.output, exprs[:-1])


def contract(
    ctx: FunctionContext,
    where: str,
    what: str,
    operands: Sequence[Sequence[str]],
    output: Sequence[str],
    exprs: Sequence[Expression],
) -> Type:
    """Lay each operand's axes (names and ``...``) against its tensor's dims, then produce
    the output's dims (einops' einsum and torch's: sizes of 1 broadcast)."""
    bindings = _bindings(ctx)
    bindings.broadcast_ones = True
    ellipses: list[Dims | None] = []
    conflicted = False  # then the result's dims are a guess: unknown
    for index, (axes, expr) in enumerate(zip(operands, exprs, strict=False)):
        dims = dims_of(expr, ctx.api)
        if dims is None:
            ellipses.append(None)
            continue
        side = tuple(ELLIPSIS if axis == ELLIPSIS else Group((axis,)) for axis in axes)
        alignment, findings, rank_error = bind_side(side, dims, _origin(expr, index), bindings)
        if rank_error:
            message = f"{where}: operand {index + 1} {rank_error}"
            report(ctx.api, message, ctx.context, codes.SHAPE)
            return keep(ctx, None)
        for finding in findings[:1]:
            report_finding(ctx.api, where, finding, ctx.context)
            conflicted = True
        ellipses.append(alignment.ellipsis if alignment else None)
    known = [ellipsis for ellipsis in ellipses if ellipsis is not None]
    same = len(known) == len(ellipses) and all(e == known[0] for e in known)
    entries = tuple(ELLIPSIS if axis == ELLIPSIS else Group((axis,)) for axis in output)
    if conflicted:
        return keep(ctx, None)
    produced = produce(entries, bindings, known[0] if same and known else None, {})
    return finish(ctx, what, produced, bindings.new_facts)


def _axes_lengths(ctx: FunctionContext) -> tuple[dict[str, Dim], bool]:
    """``**axes_lengths`` of a call: name -> size (an integer literal or unknown), and
    whether every name is seen (no ``**mapping``)."""
    sizes: dict[str, Dim] = {}
    complete = True
    for kinds, names, exprs in zip(ctx.arg_kinds, ctx.arg_names, ctx.args, strict=True):
        for kind, name, expr in zip(kinds, names, exprs, strict=True):
            if kind == ARG_STAR2:
                complete = False
            elif kind == ARG_NAMED and name is not None and name not in ("pattern", "reduction"):
                sizes[name] = Axis((), expr.value) if isinstance(expr, IntExpr) else Unknown()
    return sizes, complete


def _reduction(ctx: FunctionContext) -> str | None:
    """The literal reduction of a ``reduce`` call (its third parameter), if there is one."""
    if len(ctx.args) > 2 and len(ctx.args[2]) == 1:
        return literal_str(ctx.args[2][0])
    return None


def transform_hook(op: str, module: str) -> Callable[[FunctionContext], Type]:
    """``rearrange``/``reduce``/``repeat(tensor, pattern, ...)``: like :func:`einsum_hook`.

    ``module`` is where the op lives: a literal reduction of einops' own ``reduce`` is
    checked here (typedflops' ``reduce`` types it as a ``Literal`` already).
    """

    def hook(ctx: FunctionContext) -> Type:
        if len(ctx.args) < 2 or len(ctx.args[0]) != 1 or len(ctx.args[1]) != 1:
            return keep(ctx, None)
        pattern = literal_str(ctx.args[1][0])
        if pattern is None:
            return keep(ctx, None)
        sizes, complete = _axes_lengths(ctx)
        where = f'{op} "{pattern}"'
        try:
            reduction = _reduction(ctx) if op == "reduce" else None
            if reduction is not None and module.startswith("einops"):
                check_reduction(reduction)
            parsed = transform_pattern(pattern, op, tuple(sizes), complete)
        except Problem as problem:
            report(ctx.api, f"{where}: {problem.reason}", ctx.context, codes.PATTERN)
            return keep(ctx, None)
        tensor = ctx.args[0][0]
        dims = dims_of(tensor, ctx.api)
        bindings = _bindings(ctx)
        _remember(ctx, bindings)  # forgets what an earlier pass recorded for this call
        ellipsis: Dims | None = None
        if dims is not None:
            alignment, findings, rank_error = bind_side(
                parsed.left.entries, dims, _origin(tensor, 0), bindings, sizes
            )
            if rank_error:
                message = f"{where}: the left side {rank_error}"
                report(ctx.api, message, ctx.context, codes.SHAPE)
                return keep(ctx, None)
            for finding in findings[:1]:
                report_finding(ctx.api, where, finding, ctx.context)
                return keep(ctx, None)
            ellipsis = alignment.ellipsis if alignment else None
        elif parsed.left.has_ellipsis:
            return finish(ctx, op, None, [])
        _remember(ctx, bindings)
        produced = produce(parsed.right.entries, bindings, ellipsis, sizes)
        return finish(ctx, op, produced, bindings.new_facts)

    return hook


def _pattern_of(ctx: FunctionContext, index: int, op: str) -> tuple[str, tuple[Dim, ...]] | None:
    """The literal pattern argument at ``index``, checked; None (reported) when wrong."""
    if len(ctx.args) <= index or len(ctx.args[index]) != 1:
        return None
    pattern = literal_str(ctx.args[index][0])
    if pattern is None:
        return None
    try:
        parsed = pack_pattern(pattern)
    except Problem as problem:
        report(ctx.api, f'{op} "{pattern}": {problem.reason}', ctx.context, codes.PATTERN)
        return None
    before: list[Dim] = [Axis((name,)) for name in parsed.before]
    after: list[Dim] = [Axis((name,)) for name in parsed.after]
    return pattern, (*before, Variadic(None), *after)


def _pack_items(pattern: tuple[Dim, ...]) -> tuple[Entry, ...]:
    return tuple(Group((str(dim),)) if isinstance(dim, Axis) else ELLIPSIS for dim in pattern)


def pack_hook(ctx: FunctionContext) -> Type:
    """``pack(tensors, pattern)``: the pattern, each listed tensor's rank and its dims
    around ``*``, which must agree across tensors."""
    record(ctx.api, ctx.context, None)
    checked = _pattern_of(ctx, 1, "pack")
    if checked is None:
        return ctx.default_return_type
    pattern, layout = checked
    where = f'pack "{pattern}"'
    listed = ctx.args[0][0] if len(ctx.args[0]) == 1 else None
    if not isinstance(listed, (ListExpr, TupleExpr)):
        return ctx.default_return_type
    bindings = Bindings()
    items = _pack_items(layout)
    for index, expr in enumerate(listed.items):
        dims = dims_of(expr, ctx.api)
        if dims is None:
            continue
        _, findings, rank_error = bind_side(items, dims, _origin(expr, index), bindings)
        if rank_error:
            message = f"{where}: tensor {index + 1} {rank_error}"
            report(ctx.api, message, ctx.context, codes.SHAPE)
            return ctx.default_return_type
        for finding in findings[:1]:
            report_finding(ctx.api, where, finding, ctx.context)
            return ctx.default_return_type
    produced = tuple(
        UNKNOWN if isinstance(dim, Variadic) else bindings.dim_of(str(dim)) for dim in layout
    )
    record(ctx.api, ctx.context, Result(items=(produced, None)))
    return ctx.default_return_type


def unpack_hook(ctx: FunctionContext) -> Type:
    """``unpack(tensor, packed_shapes, pattern)``: the pattern and the packed tensor's rank
    (one axis where ``*`` is)."""
    record(ctx.api, ctx.context, None)
    checked = _pattern_of(ctx, 2, "unpack")
    if checked is None or len(ctx.args[0]) != 1:
        return ctx.default_return_type
    pattern, layout = checked
    tensor = ctx.args[0][0]
    dims = dims_of(tensor, ctx.api)
    if dims is None:
        return ctx.default_return_type
    # One axis where "*" is; "*" is never an axis name, so it binds nothing of the pattern's.
    packed = tuple(Group((str(d),)) if isinstance(d, Axis) else Group(("*",)) for d in layout)
    bindings = Bindings()
    _, findings, rank_error = bind_side(packed, dims, _origin(tensor, 0), bindings)
    if rank_error:
        report(ctx.api, f'unpack "{pattern}": the pattern {rank_error}', ctx.context, codes.SHAPE)
        return ctx.default_return_type
    for finding in findings[:1]:
        report_finding(ctx.api, f'unpack "{pattern}"', finding, ctx.context)
        return ctx.default_return_type
    unpacked = tuple(
        Variadic(None) if isinstance(dim, Variadic) else bindings.dim_of(str(dim)) for dim in layout
    )
    record(ctx.api, ctx.context, Result(each=unpacked))
    return ctx.default_return_type


def layer_hook(op: str) -> Callable[[FunctionContext], Type]:
    """``Rearrange(pattern, **lengths)`` and ``Reduce(pattern, reduction, **lengths)`` of
    ``einops.layers.torch``: einops checks the pattern when the layer is built, so do we."""
    transform = "reduce" if op == "Reduce" else "rearrange"

    def hook(ctx: FunctionContext) -> Type:
        call = ctx.context
        if not isinstance(call, CallExpr):
            return ctx.default_return_type
        positional = [
            arg for arg, kind in zip(call.args, call.arg_kinds, strict=True) if kind == ARG_POS
        ]
        named = {name: arg for arg, name in zip(call.args, call.arg_names, strict=True) if name}
        pattern_arg = named.get("pattern", positional[0] if positional else None)
        pattern = literal_str(pattern_arg) if pattern_arg is not None else None
        if pattern is None:
            return ctx.default_return_type
        reduction_arg = named.get("reduction", positional[1] if len(positional) > 1 else None)
        lengths = tuple(name for name in named if name not in ("pattern", "reduction"))
        complete = ARG_STAR2 not in call.arg_kinds
        try:
            if transform == "reduce" and reduction_arg is not None:
                reduction = literal_str(reduction_arg)
                if reduction is not None:
                    check_reduction(reduction)
            transform_pattern(pattern, transform, lengths, complete)
        except Problem as problem:
            report(ctx.api, f'{op} "{pattern}": {problem.reason}', call, codes.PATTERN)
        return ctx.default_return_type

    return hook
