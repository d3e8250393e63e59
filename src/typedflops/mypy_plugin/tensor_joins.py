"""torch operations that split, join, pad or factor tensors, whose result's dims follow from
their operands' dims and literal arguments.

- ``x.chunk(k, dim)`` / ``torch.chunk(x, k, dim)`` with literal ``k``: ``k`` tensors; the
  split axis is ``n/k`` when that is a whole size, else unknown;
- ``torch.cat((a, b), dim)`` with a literal sequence and ``dim``: the joined axis is the sum
  when the parts add up to a product of names (``n`` and ``n`` make ``2*n``), else unknown;
- ``F.pad(x, (left, right, ...))`` with literal amounts: each padded axis grows by its
  amounts (a named axis padded by a non-zero total becomes unknown);
- ``F.one_hot(x, k)``: ``x``'s dims and one more axis, ``k`` when literal;
- ``torch.linalg.solve(a, b)``: ``b``'s dims when ``a`` is a matrix of the same batch;
- ``torch.linalg.cholesky(a)``: ``a``'s dims; ``torch.diagonal(x, 0, dim1, dim2)``: the two
  axes (literal, of equal dims) dropped and one appended.

Nothing is reported here: what a result carries is checked where it is used or returned.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.nodes import ARG_NAMED, ARG_POS, Expression, IntExpr, ListExpr, TupleExpr
from mypy.plugin import FunctionContext, MethodContext
from mypy.types import Type

from .report import finish, keep
from .static import UNKNOWN, Axis, Dim, Dims, Variadic
from .tensor_methods import OWNERS, _fixed, _index, _int, _operand
from .values import DERIVED_CALLS, Result, dims_of, record

__all__ = ["FUNCTION_HOOKS", "METHOD_HOOKS"]

_ZERO, _ONE = IntExpr(0), IntExpr(1)  # the defaults of dim, dim1 and dim2


def _arguments(
    ctx: FunctionContext | MethodContext, names: tuple[str, ...]
) -> dict[str, Expression] | None:
    """The call's arguments by parameter name (positional ones in the order of ``names``);
    None when a ``*args``/``**kwargs`` or an unexpected argument is passed."""
    found: dict[str, Expression] = {}
    position = 0
    for kinds, arg_names, exprs in zip(ctx.arg_kinds, ctx.arg_names, ctx.args, strict=True):
        for kind, name, expr in zip(kinds, arg_names, exprs, strict=True):
            if kind == ARG_POS and position < len(names):
                found[names[position]] = expr
                position += 1
            elif kind == ARG_NAMED and name in names:
                found[name] = expr
            else:
                return None
    return found


def _divided(axis: Dim, parts: int) -> Dim:
    if isinstance(axis, Axis) and parts > 0 and axis.size % parts == 0:
        return Axis(axis.factors, axis.size // parts)
    return UNKNOWN


def _chunks(
    ctx: FunctionContext | MethodContext, dims: Dims | None, found: dict[str, Expression]
) -> Type:
    count = _int(found["chunks"]) if "chunks" in found else None
    fixed = _fixed(dims)
    at = _index(_int(found.get("dim") or _ZERO), len(fixed)) if fixed is not None else None
    if fixed is None or count is None or at is None or count < 1:
        return keep(ctx, None)
    axis = fixed[at]
    if not isinstance(axis, Axis) or (axis.is_fixed and axis.size % count):
        return keep(ctx, None)  # uneven pieces
    piece = (*fixed[:at], _divided(axis, count), *fixed[at + 1 :])
    # "d" in 2 pieces: as many as d allows, each of an unknown size
    even = axis.size % count == 0
    result = Result(items=(piece,) * count) if even else Result(each=piece)
    record(ctx.api, ctx.context, result)
    return ctx.default_return_type


def _chunk_method(ctx: MethodContext) -> Type:
    operand = _operand(ctx)
    found = _arguments(ctx, ("chunks", "dim"))
    if operand is None or found is None:
        return keep(ctx, None)
    return _chunks(ctx, dims_of(operand, ctx.api), found)


def _chunk_function(ctx: FunctionContext) -> Type:
    found = _arguments(ctx, ("input", "chunks", "dim"))
    if found is None or "input" not in found:
        return keep(ctx, None)
    return _chunks(ctx, dims_of(found["input"], ctx.api), found)


def _summed(axes: list[Dim]) -> Dim:
    if not all(isinstance(a, Axis) for a in axes):
        return UNKNOWN
    first = axes[0]
    assert isinstance(first, Axis)
    if any(isinstance(a, Axis) and a.factors != first.factors for a in axes):
        return UNKNOWN
    return Axis(first.factors, sum(a.size for a in axes if isinstance(a, Axis)))


def _cat(ctx: FunctionContext) -> Type:
    found = _arguments(ctx, ("tensors", "dim"))
    tensors = found.get("tensors") if found is not None else None
    if found is None or not isinstance(tensors, (TupleExpr, ListExpr)) or not tensors.items:
        return keep(ctx, None)
    parts = [_fixed(dims_of(item, ctx.api)) for item in tensors.items]
    rank = len(parts[0]) if parts[0] is not None else -1
    at = _index(_int(found.get("dim") or _ZERO), rank)
    if at is None or any(p is None or len(p) != rank for p in parts):
        return keep(ctx, None)
    known = [p for p in parts if p is not None]
    joined: list[Dim] = []
    for i in range(rank):
        axes = [p[i] for p in known]
        if i == at:
            joined.append(_summed(axes))
        else:  # the other axes agree at run time: any part's known name serves
            joined.append(next((a for a in axes if isinstance(a, Axis)), UNKNOWN))
    return finish(ctx, "cat", tuple(joined), [])


def _pad(ctx: FunctionContext) -> Type:
    found = _arguments(ctx, ("input", "pad", "mode", "value"))
    if found is None or "input" not in found or not isinstance(found.get("pad"), TupleExpr):
        return keep(ctx, None)
    pad = found["pad"]
    assert isinstance(pad, TupleExpr)
    amounts = [_int(item) for item in pad.items]
    dims = _fixed(dims_of(found["input"], ctx.api))
    if dims is None or None in amounts or len(amounts) % 2 or len(amounts) // 2 > len(dims):
        return keep(ctx, None)
    padded = list(dims)
    for pair in range(len(amounts) // 2):
        left, right = amounts[2 * pair], amounts[2 * pair + 1]
        assert left is not None and right is not None
        axis = padded[-1 - pair]
        if left + right == 0:
            continue
        if isinstance(axis, Axis) and axis.is_fixed and axis.size + left + right >= 0:
            padded[-1 - pair] = Axis((), axis.size + left + right)
        else:
            padded[-1 - pair] = UNKNOWN
    return finish(ctx, "pad", tuple(padded), [])


def _one_hot(ctx: FunctionContext) -> Type:
    found = _arguments(ctx, ("tensor", "num_classes"))
    if found is None or "tensor" not in found:
        return keep(ctx, None)
    dims = dims_of(found["tensor"], ctx.api)
    classes = _int(found["num_classes"]) if "num_classes" in found else None
    if dims is None:
        return keep(ctx, None)
    extra: Dim = Axis((), classes) if classes is not None and classes >= 0 else UNKNOWN
    return finish(ctx, "one_hot", (*dims, extra), [])


def solved(arguments: list[Dims | None]) -> Dims | None:
    """``torch.linalg.solve(a, b)``: ``b``'s dims when ``a`` is a matrix of ``b``'s batch."""
    if len(arguments) != 2:
        return None
    matrix, rhs = arguments
    if matrix is None or rhs is None or len(matrix) < 2 or len(matrix) != len(rhs):
        return None
    if matrix[:-2] != rhs[:-2] or any(isinstance(d, Variadic) for d in matrix[-2:] + rhs[-2:]):
        return None
    return rhs


def factored(arguments: list[Dims | None]) -> Dims | None:
    """``torch.linalg.cholesky(a)``: ``a``'s dims when it ends in a matrix."""
    dims = arguments[0] if len(arguments) == 1 else None
    if dims is None or len(dims) < 2 or any(isinstance(d, Variadic) for d in dims[-2:]):
        return None
    return dims


def _diagonal(ctx: FunctionContext) -> Type:
    found = _arguments(ctx, ("input", "offset", "dim1", "dim2"))
    if found is None or "input" not in found or _int(found.get("offset") or _ZERO) != 0:
        return keep(ctx, None)
    dims = _fixed(dims_of(found["input"], ctx.api))
    if dims is None:
        return keep(ctx, None)
    first = _index(_int(found.get("dim1") or _ZERO), len(dims))
    second = _index(_int(found.get("dim2") or _ONE), len(dims))
    if first is None or second is None or first == second or dims[first] != dims[second]:
        return keep(ctx, None)
    kept = tuple(d for i, d in enumerate(dims) if i not in (first, second))
    return finish(ctx, "diagonal", (*kept, dims[first]), [])


METHOD_HOOKS: dict[str, Callable[[MethodContext], Type]] = {
    f"{owner}.chunk": _chunk_method for owner in OWNERS
}
FUNCTION_HOOKS: dict[str, Callable[[FunctionContext], Type]] = {}
for _names, _hook in (
    (("torch.cat", "torch.concat", "torch.concatenate"), _cat),
    (("torch.chunk",), _chunk_function),
    (("torch.nn.functional.pad", "torch._C._nn.pad"), _pad),
    (("torch.nn.functional.one_hot", "torch._C._nn.one_hot"), _one_hot),
    (("torch.diagonal",), _diagonal),
):
    for _name in _names:
        FUNCTION_HOOKS[_name] = _hook
        if _name.startswith("torch.") and _name.count(".") == 1:
            FUNCTION_HOOKS["torch._C._VariableFunctions." + _name[6:]] = _hook
DERIVED_CALLS.update({"torch.linalg.solve": solved, "torch.linalg.cholesky": factored})
