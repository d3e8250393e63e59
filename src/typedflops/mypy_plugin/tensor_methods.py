"""torch's own tensor operations whose result's dims follow from their operands' dims.

- elementwise and conversion methods and functions (``x.float()``, ``x.softmax(-1)``,
  ``x.masked_fill(m, 0)``, ``F.gelu(x)``, ``torch.sigmoid(x)``): the operand's dims;
- axis moves with literal indices: ``transpose``/``swapaxes``/``swapdims``, ``permute``,
  ``unsqueeze``, ``t()``, ``.T``, ``.mT``;
- reductions over literal dims (``sum``, ``mean``, ``amax``, ``amin``, ``prod``,
  ``logsumexp``, ``any``, ``all``; ``keepdim`` read when literal);
- arithmetic and comparisons between tensors (``+ - * / **``, ``< == ...``, ``& |``):
  broadcast, and checked: two different dims against each other is a ``dim-alias``, two
  different sizes (neither 1) a ``shape`` error;
- matrix products (``@``, ``torch.matmul``, ``F.linear``): the contracted axes checked, the
  batch axes broadcast.

Anything else (a non-literal index, a variadic dim where an index lands, an operand of
unknown dims) gives an unknown result, and nothing is reported.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.nodes import (
    ARG_NAMED,
    ARG_POS,
    CallExpr,
    Context,
    Expression,
    IntExpr,
    MemberExpr,
    NameExpr,
    OpExpr,
    TupleExpr,
    UnaryExpr,
)
from mypy.plugin import AttributeContext, FunctionContext, MethodContext
from mypy.types import Instance, LiteralType, Type, get_proper_type

from . import codes
from .report import finish, keep, report
from .shapes import compare
from .static import UNKNOWN, Axis, Dim, Dims, Unknown, Variadic, format_dims
from .values import DERIVED, Result, dims_of, record

__all__ = ["ATTRIBUTE_HOOKS", "FUNCTION_HOOKS", "METHOD_HOOKS"]

ONE = Axis((), 1)
OWNERS = ("torch._C.TensorBase", "torch._tensor.Tensor")
SAME_DIMS = frozenset(
    {
        "float", "half", "bfloat16", "double", "int", "long", "bool", "to", "type_as",
        "contiguous", "clone", "detach", "cpu", "cuda", "requires_grad_", "abs", "exp",
        "log", "log1p", "sqrt", "rsqrt", "sigmoid", "tanh", "relu", "neg", "sin", "cos",
        "square", "sign", "reciprocal", "erf", "clamp", "clamp_min", "clamp_max", "softmax",
        "log_softmax", "masked_fill", "nan_to_num", "__neg__", "__abs__", "__invert__",
    }
)  # fmt: skip
BINARY = frozenset(
    {
        "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
        "__rtruediv__", "__pow__", "__rpow__", "__lt__", "__le__", "__gt__", "__ge__",
        "__eq__", "__ne__", "__and__", "__rand__", "__or__", "__ror__",
    }
)  # fmt: skip
MOVES = ("transpose", "swapaxes", "swapdims", "permute", "unsqueeze", "t")
REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "prod", "logsumexp", "any", "all"})
SAME_DIMS_FUNCTIONS = frozenset(
    {
        "torch.sigmoid", "torch.tanh", "torch.relu", "torch.exp", "torch.log", "torch.sqrt",
        "torch.abs", "torch.softmax", "torch.log_softmax",
        "torch.nn.functional.relu", "torch.nn.functional.gelu", "torch.nn.functional.silu",
        "torch.nn.functional.softmax", "torch.nn.functional.log_softmax",
        "torch.nn.functional.normalize", "torch.nn.functional.dropout",
        "torch.nn.functional.softplus", "torch.nn.functional.elu",
        "torch.nn.functional.layer_norm", "torch.nn.functional.leaky_relu",
        "torch.nn.functional.mish",
    }
)  # fmt: skip


def _operand(ctx: FunctionContext | MethodContext) -> Expression | None:
    """The tensor a method is called on (``x`` in ``x.float()``), else the first argument
    (``x`` in ``F.gelu(x)``)."""
    call = ctx.context
    method = isinstance(ctx, MethodContext)
    if method and isinstance(call, CallExpr) and isinstance(call.callee, MemberExpr):
        return call.callee.expr
    if isinstance(call, UnaryExpr):
        return call.expr
    first = ctx.args[0] if ctx.args else []
    return first[0] if first else None


def _same_dims(ctx: FunctionContext | MethodContext) -> Type:
    operand = _operand(ctx)
    if isinstance(ctx, MethodContext) and not isinstance(ctx.context, (CallExpr, UnaryExpr)):
        return keep(ctx, None)
    return _produced(ctx, dims_of(operand, ctx.api) if operand is not None else None)


def _produced(ctx: FunctionContext | MethodContext, dims: Dims | None) -> Type:
    """Keep ``dims`` as the result's, checked against the return when it is returned."""
    if dims is None:
        return keep(ctx, None)
    call = ctx.context
    callee = call.callee if isinstance(call, CallExpr) else None
    name = callee.name if isinstance(callee, (MemberExpr, NameExpr)) else "the result"
    return finish(ctx, name, dims, [])


def _int(expr: Expression) -> int | None:
    if isinstance(expr, IntExpr):
        return expr.value
    if isinstance(expr, UnaryExpr) and expr.op == "-" and isinstance(expr.expr, IntExpr):
        return -expr.expr.value
    return None


def _arguments(ctx: MethodContext) -> tuple[list[Expression], dict[str, Expression]]:
    positional: list[Expression] = []
    named: dict[str, Expression] = {}
    for kinds, names, exprs in zip(ctx.arg_kinds, ctx.arg_names, ctx.args, strict=True):
        for kind, name, expr in zip(kinds, names, exprs, strict=True):
            if kind == ARG_POS:
                positional.append(expr)
            elif kind == ARG_NAMED and name is not None:
                named[name] = expr
            else:
                return [], {"*": expr}  # *args, **kwargs: not read
    return positional, named


def _index(index: int | None, rank: int) -> int | None:
    if index is None or not -rank <= index < rank:
        return None
    return index % rank


def _fixed(dims: Dims | None) -> Dims | None:
    """``dims`` when they have no variadic part (so indices land on known axes)."""
    return dims if dims is not None and not any(isinstance(d, Variadic) for d in dims) else None


def _moved(name: str, dims: Dims, positional: list[Expression]) -> Dims | None:
    rank = len(dims)
    if name in ("transpose", "swapaxes", "swapdims") and len(positional) == 2:
        first, second = (_index(_int(e), rank) for e in positional)
        if first is None or second is None:
            return None
        moved = list(dims)
        moved[first], moved[second] = moved[second], moved[first]
        return tuple(moved)
    if name == "t" and not positional and rank <= 2:
        return tuple(reversed(dims))
    if name == "permute":
        items = positional
        if len(positional) == 1 and isinstance(positional[0], TupleExpr):
            items = positional[0].items
        order = [_index(_int(e), rank) for e in items]
        if len(order) != rank or None in order or len(set(order)) != rank:
            return None
        return tuple(dims[i] for i in order if i is not None)
    if name == "unsqueeze" and len(positional) == 1:
        at = _index(_int(positional[0]), rank + 1)
        return None if at is None else (*dims[:at], ONE, *dims[at:])
    return None


def _derived_move(name: str) -> Callable[[Dims, list[Expression]], Dims | None]:
    def derive(dims: Dims, positional: list[Expression]) -> Dims | None:
        fixed = _fixed(dims)
        return None if fixed is None else _moved(name, fixed, positional)

    return derive


def _derived_same(dims: Dims, positional: list[Expression]) -> Dims | None:
    return dims


def _move_hook(name: str) -> Callable[[MethodContext], Type]:
    def hook(ctx: MethodContext) -> Type:
        operand = _operand(ctx)
        dims = _fixed(dims_of(operand, ctx.api)) if operand is not None else None
        positional, named = _arguments(ctx)
        if dims is None or named:
            return keep(ctx, None)
        return _produced(ctx, _moved(name, dims, positional))

    return hook


def _reduce_hook(ctx: MethodContext) -> Type:
    operand = _operand(ctx)
    dims = dims_of(operand, ctx.api) if operand is not None else None
    positional, named = _arguments(ctx)
    if dims is None or "*" in named or "dtype" in named:
        return keep(ctx, None)
    if not positional and "dim" not in named:
        return _produced(ctx, () if not named else None)  # over every axis: a scalar
    axes = named.get("dim", positional[0] if positional else None)
    keepdim = named.get("keepdim", positional[1] if len(positional) > 1 else None)
    literal = isinstance(keepdim, NameExpr) and keepdim.name in ("True", "False")
    if keepdim is not None and not literal:
        return keep(ctx, None)
    keeps = isinstance(keepdim, NameExpr) and keepdim.name == "True"
    fixed = _fixed(dims)
    items = axes.items if isinstance(axes, TupleExpr) else [axes] if axes is not None else []
    indices = {_index(_int(e), len(fixed)) for e in items} if fixed is not None else {None}
    if fixed is None or None in indices:
        return keep(ctx, None)
    reduced = tuple(
        ONE if i in indices else dim for i, dim in enumerate(fixed) if keeps or i not in indices
    )
    return _produced(ctx, reduced)


def _scalar(typ: Type) -> bool:
    proper = get_proper_type(typ)
    if isinstance(proper, LiteralType):
        proper = proper.fallback
    return isinstance(proper, Instance) and proper.type.fullname in (
        "builtins.int",
        "builtins.float",
        "builtins.bool",
        "builtins.complex",
    )


def broadcast(first: Dims, second: Dims) -> tuple[Dims | None, tuple[Dim, Dim] | None]:
    """The dims of ``first`` and ``second`` broadcast together, and the first pair of axes
    that cannot broadcast (None when they can). Axes are compared from the right as far as
    neither side is variadic; past that, the result is unknown."""
    if first == second:
        return first, None
    result: list[Dim] = []
    for offset in range(1, max(len(first), len(second)) + 1):
        mine = first[-offset] if offset <= len(first) else None
        theirs = second[-offset] if offset <= len(second) else None
        if isinstance(mine, Variadic) or isinstance(theirs, Variadic):
            return None, None
        if mine is None or theirs is None:
            result.append(theirs if mine is None else mine)  # type: ignore[arg-type]
        elif mine == theirs or theirs == ONE:
            result.append(mine)
        elif mine == ONE:
            result.append(theirs)
        elif isinstance(mine, Unknown) or isinstance(theirs, Unknown):
            result.append(UNKNOWN)
        elif compare(mine, theirs) is not None:
            return None, (mine, theirs)
        else:  # a name against a size: the size, whatever the name stands for (it or 1)
            result.append(mine if mine.is_fixed else theirs)
    return tuple(reversed(result)), None


def _operands(ctx: MethodContext) -> tuple[Expression, Expression] | None:
    context = ctx.context
    return (context.left, context.right) if isinstance(context, OpExpr) else None


def _origin(expr: Expression) -> str:
    return expr.name if isinstance(expr, NameExpr) else "the other operand"


def _binary_hook(ctx: MethodContext) -> Type:
    operands = _operands(ctx)
    if operands is None:
        return keep(ctx, None)
    left, right = operands
    left_dims, right_dims = dims_of(left, ctx.api), dims_of(right, ctx.api)
    op = ctx.context.op if isinstance(ctx.context, OpExpr) else "?"
    other = ctx.arg_types[0][0] if ctx.arg_types and ctx.arg_types[0] else None
    if left_dims is not None and right_dims is None and other is not None and _scalar(other):
        return finish(ctx, op, left_dims, [])
    if right_dims is not None and left_dims is None and other is not None and _scalar(other):
        return finish(ctx, op, right_dims, [])  # 2 * x: x.__rmul__, given the int's type
    if left_dims is None or right_dims is None:
        return keep(ctx, None)
    result, clash = broadcast(left_dims, right_dims)
    if clash is not None:
        mine, theirs = clash
        code = codes.SHAPE if compare(mine, theirs) == "shape" else codes.DIM_ALIAS
        message = (
            f'{_origin(left)} {op} {_origin(right)}: "{format_dims(left_dims)}" and '
            f'"{format_dims(right_dims)}" do not broadcast, "{mine}" against "{theirs}"'
        )
        report(ctx.api, message, ctx.context, code)
        return keep(ctx, None)
    return finish(ctx, op, result, []) if result is not None else keep(ctx, None)


def matmul(first: Dims, second: Dims) -> tuple[Dims | None, tuple[Dim, Dim] | None]:
    """``first @ second``: the result's dims and the contracted pair if it clashes."""
    if not first or not second:
        return None, None
    contracted_first = first[-1]
    contracted_second = second[-2] if len(second) > 1 else second[-1]
    if isinstance(contracted_first, Variadic) or isinstance(contracted_second, Variadic):
        return None, None
    if compare(contracted_first, contracted_second) is not None:
        return None, (contracted_first, contracted_second)
    if len(first) > 1 and isinstance(first[-2], Variadic):
        return None, None
    rows = (first[-2],) if len(first) > 1 else ()
    columns = (second[-1],) if len(second) > 1 else ()
    if len(second) > 1 and isinstance(second[-1], Variadic):
        return None, None
    batch_first, batch_second = first[:-2], second[:-2]
    if not batch_first or not batch_second or batch_first == batch_second:
        batch: Dims | None = batch_first or batch_second
    else:
        batch = broadcast(batch_first, batch_second)[0]
    return (None if batch is None else (*batch, *rows, *columns)), None


def _product(ctx: FunctionContext | MethodContext, left: Expression, right: Expression) -> Type:
    left_dims, right_dims = dims_of(left, ctx.api), dims_of(right, ctx.api)
    if left_dims is None or right_dims is None:
        return keep(ctx, None)
    result, clash = matmul(left_dims, right_dims)
    if clash is not None:
        mine, theirs = clash
        code = codes.SHAPE if compare(mine, theirs) == "shape" else codes.DIM_ALIAS
        message = (
            f'{_origin(left)} @ {_origin(right)}: the contracted axis is "{mine}" in '
            f'"{format_dims(left_dims)}" but "{theirs}" in "{format_dims(right_dims)}"'
        )
        report(ctx.api, message, ctx.context, code)
        return keep(ctx, None)
    return finish(ctx, "@", result, []) if result is not None else keep(ctx, None)


def _matmul_operator_hook(ctx: MethodContext) -> Type:
    operands = _operands(ctx)
    return _product(ctx, *operands) if operands is not None else keep(ctx, None)


def _matmul_function_hook(ctx: FunctionContext) -> Type:
    exprs = [expr for group in ctx.args for expr in group]
    if len(exprs) != 2 or any(kind != ARG_POS for group in ctx.arg_kinds for kind in group):
        return keep(ctx, None)
    return _product(ctx, exprs[0], exprs[1])


def _linear_hook(ctx: FunctionContext) -> Type:
    """``F.linear(x, weight[, bias])``: ``x @ weight.T`` (weight ``out in``)."""
    exprs = [expr for group in ctx.args for expr in group]
    if len(exprs) < 2 or any(kind != ARG_POS for group in ctx.arg_kinds for kind in group):
        return keep(ctx, None)
    x, weight = dims_of(exprs[0], ctx.api), dims_of(exprs[1], ctx.api)
    if x is None or weight is None or len(weight) != 2 or not x:
        return keep(ctx, None)
    return _product_dims(ctx, exprs[0], x, exprs[1], (weight[1], weight[0]))


def _product_dims(
    ctx: FunctionContext, left: Expression, left_dims: Dims, right: Expression, right_dims: Dims
) -> Type:
    result, clash = matmul(left_dims, right_dims)
    if clash is not None:
        mine, theirs = clash
        code = codes.SHAPE if compare(mine, theirs) == "shape" else codes.DIM_ALIAS
        weight = format_dims(right_dims[::-1])
        message = (
            f'linear({_origin(left)}, {_origin(right)}): the contracted axis is "{mine}" in '
            f'"{format_dims(left_dims)}" but "{theirs}" in the weight\'s "{weight}"'
        )
        report(ctx.api, message, ctx.context, code)
        return keep(ctx, None)
    return finish(ctx, "linear", result, []) if result is not None else keep(ctx, None)


def _transposed_attribute(name: str) -> Callable[[AttributeContext], Type]:
    """``x.T`` (a matrix's axes reversed) and ``x.mT`` (the last two swapped)."""

    def hook(ctx: AttributeContext) -> Type:
        context: Context = ctx.context
        if not isinstance(context, MemberExpr) or ctx.is_lvalue:
            return ctx.default_attr_type
        dims = _fixed(dims_of(context.expr, ctx.api))
        if dims is None or (name == "T" and len(dims) != 2) or len(dims) < 2:
            result: Dims | None = None
        else:
            result = (*dims[:-2], dims[-1], dims[-2])
        record(ctx.api, context, Result(dims=result) if result is not None else None)
        return ctx.default_attr_type

    return hook


METHOD_HOOKS: dict[str, Callable[[MethodContext], Type]] = {}
for _owner in OWNERS:
    for _name in SAME_DIMS:
        METHOD_HOOKS[f"{_owner}.{_name}"] = _same_dims
    for _name in BINARY:
        METHOD_HOOKS[f"{_owner}.{_name}"] = _binary_hook
    for _name in MOVES:
        METHOD_HOOKS[f"{_owner}.{_name}"] = _move_hook(_name)
    for _name in REDUCTIONS:
        METHOD_HOOKS[f"{_owner}.{_name}"] = _reduce_hook
    METHOD_HOOKS[f"{_owner}.__matmul__"] = _matmul_operator_hook
    METHOD_HOOKS[f"{_owner}.__rmatmul__"] = _matmul_operator_hook

# torch's stubs define many of these functions elsewhere and import them under the public
# name: mypy calls them by the name where they are defined.
DEFINED_IN = {"torch.": "torch._C._VariableFunctions.", "torch.nn.functional.": "torch._C._nn."}
DERIVED.update(dict.fromkeys(SAME_DIMS, _derived_same))
DERIVED.update({name: _derived_move(name) for name in MOVES})

FUNCTION_HOOKS: dict[str, Callable[[FunctionContext], Type]] = {}
for _name in SAME_DIMS_FUNCTIONS:
    FUNCTION_HOOKS[_name] = _same_dims
    _module, _, _function = _name.rpartition(".")
    FUNCTION_HOOKS[DEFINED_IN[f"{_module}."] + _function] = _same_dims
FUNCTION_HOOKS["torch.matmul"] = _matmul_function_hook
FUNCTION_HOOKS["torch._C._VariableFunctions.matmul"] = _matmul_function_hook
FUNCTION_HOOKS["torch.nn.functional.linear"] = _linear_hook
FUNCTION_HOOKS["torch._C._nn.linear"] = _linear_hook

ATTRIBUTE_HOOKS: dict[str, Callable[[AttributeContext], Type]] = {
    f"{owner}.{name}": _transposed_attribute(name) for owner in OWNERS for name in ("T", "mT")
}
