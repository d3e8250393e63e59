"""The mypy hooks: jaxtyping annotations, einops ops, user functions, modules, ``flops=``.

Each hook returns mypy's own answer unchanged unless it knows better, and reports only what
is certain from the code it sees (see :mod:`.tensors` for which dims it trusts).
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.checker import TypeChecker
from mypy.errorcodes import VALID_TYPE, ErrorCode
from mypy.nodes import (
    ARG_NAMED,
    ARG_OPT,
    ARG_POS,
    ARG_STAR2,
    FUNC_NO_INFO,
    CallExpr,
    Context,
    Decorator,
    Expression,
    FuncDef,
    IntExpr,
    MemberExpr,
    NameExpr,
    RefExpr,
    StrExpr,
    TypeInfo,
)
from mypy.plugin import (
    AnalyzeTypeContext,
    CheckerPluginInterface,
    FunctionContext,
    MethodContext,
    MethodSigContext,
)
from mypy.typeanal import TypeAnalyser
from mypy.typeops import bind_self
from mypy.types import (
    AnyType,
    CallableType,
    FunctionLike,
    Instance,
    LiteralType,
    RawExpressionType,
    Type,
    TypeOfAny,
    UnboundType,
    get_proper_type,
)

from . import codes
from .dims import (
    Axis,
    Dim,
    Dims,
    FormulaError,
    PatternSyntaxError,
    Unknown,
    Variadic,
    format_dims,
    formula_names,
    named_dims,
    parse_dims,
    parse_einsum,
    parse_transform,
)
from .scopes import find_decorated, function_facts
from .shapes import Bindings, Problem, align, bind_side, check_produced, produce
from .tensors import (
    ANNOTATED,
    annotated_dims,
    current_function,
    is_tensor,
    trusted_dims,
    with_dims,
)

# jaxtyping spells these `Annotated` for static checkers (jaxtyping/_indirection.py).
JAXTYPING_DTYPES = frozenset(
    {
        "BFloat16",
        "Bool",
        "Complex",
        "Complex64",
        "Complex128",
        "Float",
        "Float8e4m3b11fnuz",
        "Float8e4m3fn",
        "Float8e4m3fnuz",
        "Float8e5m2",
        "Float8e5m2fnuz",
        "Float16",
        "Float32",
        "Float64",
        "Inexact",
        "Int",
        "Int2",
        "Int4",
        "Int8",
        "Int16",
        "Int32",
        "Int64",
        "Integer",
        "Key",
        "Num",
        "Real",
        "Shaped",
        "UInt",
        "UInt2",
        "UInt4",
        "UInt8",
        "UInt16",
        "UInt32",
        "UInt64",
    }
)
MODULE = "torch.nn.modules.module.Module"
# Decorators known to keep a function's signature, so its annotations still describe calls.
SIGNATURE_KEEPING = frozenset(
    {
        "typedflops.typed_flops",
        "typedflops.decorator.typed_flops",
        "jaxtyping.jaxtyped",
        "jaxtyping._decorator.jaxtyped",
        "beartype.beartype",
        "beartype._decor.decorcache.beartype",
        "typing.override",
        "typing_extensions.override",
        "typing.final",
        "typing_extensions.final",
        "builtins.staticmethod",
    }
)


def _report(api: CheckerPluginInterface, message: str, context: Context, code: ErrorCode) -> None:
    api.fail(message, context, code=code)


def _report_problem(
    api: CheckerPluginInterface, prefix: str, problem: Problem, ctx: Context
) -> None:
    code = codes.SHAPE if problem.severity == "shape" else codes.DIM_ALIAS
    _report(api, f"{prefix}: {problem.message}", ctx, code)


# --------------------------------------------------------------------------- annotations


def analyze_annotated(ctx: AnalyzeTypeContext) -> Type:
    """``Annotated[...]``: mypy's own analysis, plus jaxtyping dims on torch tensors."""
    unbound, api = ctx.type, ctx.api
    if len(unbound.args) < 2:
        # The message and code of mypy's own check, which this hook replaces.
        api.fail(
            "Annotated[...] must have exactly one type argument and at least one annotation",
            ctx.context,
            code=VALID_TYPE,
        )
        return AnyType(TypeOfAny.from_error)
    if isinstance(api, TypeAnalyser):
        analyzed = api.anal_type(
            unbound.args[0], allow_typed_dict_special_forms=api.allow_typed_dict_special_forms
        )
    else:
        analyzed = api.analyze_type(unbound.args[0])
    if unbound.name.rpartition(".")[2] not in JAXTYPING_DTYPES or len(unbound.args) != 2:
        return analyzed
    dim_str = _raw_string(unbound.args[1])
    proper = get_proper_type(analyzed)
    dims = parse_dims(dim_str) if dim_str is not None else None
    if dims is None or not is_tensor(proper):
        return analyzed
    assert isinstance(proper, Instance)
    literal = LiteralType(format_dims(dims), api.named_type("builtins.str", []))
    return proper.copy_with_extra_attr(ANNOTATED, literal)


def _raw_string(arg: Type) -> str | None:
    if isinstance(arg, RawExpressionType) and isinstance(arg.literal_value, str):
        return arg.literal_value
    if isinstance(arg, UnboundType) and not arg.args:
        return arg.original_str_expr  # a one-word string parses as a type name
    return None


# --------------------------------------------------------------------------- einops ops


def _literal_str(expr: Expression) -> str | None:
    return expr.value if isinstance(expr, StrExpr) else None


def _origin(expr: Expression, index: int) -> str:
    return expr.name if isinstance(expr, (NameExpr, MemberExpr)) else f"operand {index + 1}"


def einsum_hook(ctx: FunctionContext) -> Type:
    """``einsum(*tensors, pattern)``: pattern syntax, operand count, ranks, bound dims."""
    exprs = [expr for group in ctx.args for expr in group]
    types = [typ for group in ctx.arg_types for typ in group]
    if not exprs or any(kind not in (ARG_POS,) for group in ctx.arg_kinds for kind in group):
        return with_dims(ctx.default_return_type, None, ctx.api)
    pattern = _literal_str(exprs[-1])
    if pattern is None:
        return with_dims(ctx.default_return_type, None, ctx.api)
    where = f'einsum pattern "{pattern}"'
    try:
        inputs, output = parse_einsum(pattern)
    except PatternSyntaxError as error:
        _report(ctx.api, f"{where}: {error}", ctx.context, codes.PATTERN)
        return with_dims(ctx.default_return_type, None, ctx.api)
    n_tensors = len(exprs) - 1
    if len(inputs) != n_tensors:
        operands = "operand" if len(inputs) == 1 else "operands"
        tensors = "tensor was" if n_tensors == 1 else "tensors were"
        message = f"{where} names {len(inputs)} {operands} but {n_tensors} {tensors} passed"
        _report(ctx.api, message, ctx.context, codes.PATTERN)
        return with_dims(ctx.default_return_type, None, ctx.api)
    bindings = Bindings()
    ellipses: list[Dims | None] = []
    conflicted = False  # then the result's dims are a guess: no return check
    for index, (side, expr, typ) in enumerate(zip(inputs, exprs, types, strict=False)):
        dims = trusted_dims(expr, typ, ctx.api)
        if dims is None:
            ellipses.append(None)
            continue
        alignment, problems, rank_error = bind_side(side, dims, _origin(expr, index), bindings)
        if rank_error:
            message = f"{where}: operand {index + 1} {rank_error}"
            _report(ctx.api, message, ctx.context, codes.SHAPE)
            return with_dims(ctx.default_return_type, None, ctx.api)
        for problem in problems[:1]:
            _report_problem(ctx.api, where, problem, ctx.context)
            conflicted = True
        ellipses.append(alignment.ellipsis if alignment else None)
    known = [ellipsis for ellipsis in ellipses if ellipsis is not None]
    same = len(known) == len(ellipses) and all(e == known[0] for e in known)
    produced = produce(output, bindings, known[0] if same and known else None, {})
    if conflicted:
        return with_dims(ctx.default_return_type, produced, ctx.api)
    return _finish(ctx, "einsum", produced)


def transform_hook(op: str) -> Callable[[FunctionContext], Type]:
    """``rearrange``/``reduce``/``repeat(tensor, pattern, ...)``: like :func:`einsum_hook`."""

    def hook(ctx: FunctionContext) -> Type:
        if len(ctx.args) < 2 or len(ctx.args[0]) != 1 or len(ctx.args[1]) != 1:
            return with_dims(ctx.default_return_type, None, ctx.api)
        pattern = _literal_str(ctx.args[1][0])
        if pattern is None:
            return with_dims(ctx.default_return_type, None, ctx.api)
        sizes, complete = _axes_lengths(ctx)
        where = f'{op} pattern "{pattern}"'
        try:
            left, right = parse_transform(pattern, op, frozenset(sizes), complete)
        except PatternSyntaxError as error:
            _report(ctx.api, f"{where}: {error}", ctx.context, codes.PATTERN)
            return with_dims(ctx.default_return_type, None, ctx.api)
        tensor = ctx.args[0][0]
        dims = trusted_dims(tensor, ctx.arg_types[0][0], ctx.api)
        bindings = Bindings()
        ellipsis: Dims | None = None
        if dims is not None:
            alignment, problems, rank_error = bind_side(left, dims, _origin(tensor, 0), bindings)
            if rank_error:
                message = f"{where}: the left side {rank_error}"
                _report(ctx.api, message, ctx.context, codes.SHAPE)
                return with_dims(ctx.default_return_type, None, ctx.api)
            for problem in problems[:1]:
                _report_problem(ctx.api, where, problem, ctx.context)
                return with_dims(ctx.default_return_type, None, ctx.api)
            ellipsis = alignment.ellipsis if alignment else None
        elif left.has_ellipsis:
            return _finish(ctx, op, None)
        return _finish(ctx, op, produce(right, bindings, ellipsis, sizes))

    return hook


def _axes_lengths(ctx: FunctionContext) -> tuple[dict[str, Dim], bool]:
    """``**axes_lengths`` of a call: name -> size (an integer literal or unknown)."""
    sizes: dict[str, Dim] = {}
    complete = True
    for kinds, names, exprs in zip(ctx.arg_kinds, ctx.arg_names, ctx.args, strict=True):
        for kind, name, expr in zip(kinds, names, exprs, strict=True):
            if kind == ARG_STAR2:
                complete = False
            elif kind == ARG_NAMED and name is not None and name not in ("pattern", "reduction"):
                sizes[name] = Axis((), expr.value) if isinstance(expr, IntExpr) else Unknown()
    return sizes, complete


def _finish(ctx: FunctionContext | MethodContext, what: str, produced: Dims | None) -> Type:
    """Check ``produced`` against the enclosing function's return, then attach it."""
    if produced is not None and isinstance(ctx.context, CallExpr):
        _check_return(ctx.api, ctx.context, what, produced)
    return with_dims(ctx.default_return_type, produced, ctx.api)


def _check_return(api: CheckerPluginInterface, call: CallExpr, what: str, produced: Dims) -> None:
    function = current_function(api)
    if function is None or not isinstance(function.type, CallableType):
        return
    annotated = annotated_dims(function.type.ret_type)
    if annotated is None or not function_facts(function).returns(call):
        return
    problem = check_produced(produced, annotated)
    if problem is not None:
        message = (
            f'{what} returns "{format_dims(produced)}" but {function.name}() is annotated'
            f' "{format_dims(annotated)}": {problem.message}'
        )
        code = codes.SHAPE if problem.severity == "shape" else codes.DIM_ALIAS
        _report(api, message, call, code)


# --------------------------------------------------------------------------- user functions


def _keeps_signature(decorator: Expression) -> bool:
    target = decorator.callee if isinstance(decorator, CallExpr) else decorator
    return isinstance(target, RefExpr) and target.fullname in SIGNATURE_KEEPING


def _signature_of(node: object) -> CallableType | None:
    """The annotated signature a call of ``node`` is checked against, if it is certain."""
    if isinstance(node, Decorator) and all(_keeps_signature(d) for d in node.original_decorators):
        node = node.func
    if isinstance(node, FuncDef) and isinstance(node.type, CallableType):
        return node.type
    return None


def _has_dims(signature: CallableType) -> bool:
    return any(annotated_dims(t) is not None for t in (*signature.arg_types, signature.ret_type))


def user_function_hook(ctx: FunctionContext) -> Type:
    """A call of the user's own annotated function: bind its dims, rename its result."""
    call = ctx.context
    callee = call.callee if isinstance(call, CallExpr) else None
    signature = _signature_of(callee.node) if isinstance(callee, RefExpr) else None
    if signature is None or not _has_dims(signature):
        return with_dims(ctx.default_return_type, None, ctx.api)
    return _carry(ctx, signature, drop_self=False, name=signature.name or "function")


def _carry(
    ctx: FunctionContext | MethodContext, signature: CallableType, *, drop_self: bool, name: str
) -> Type:
    """Bind the callee's dims to the arguments', report conflicts, return renamed dims."""
    formal_types = signature.arg_types[1:] if drop_self else signature.arg_types
    formal_kinds = signature.arg_kinds[1:] if drop_self else signature.arg_kinds
    formal_names = signature.arg_names[1:] if drop_self else signature.arg_names
    if len(formal_types) != len(ctx.args):
        return with_dims(ctx.default_return_type, None, ctx.api)
    where = f"{name}()"
    bindings = Bindings()
    variadics: dict[str, Dims] = {}
    reported = False
    for formal, kind, formal_name, exprs, types in zip(
        formal_types, formal_kinds, formal_names, ctx.args, ctx.arg_types, strict=True
    ):
        formal_dims = annotated_dims(formal)
        if formal_dims is None or kind not in (ARG_POS, ARG_OPT, ARG_NAMED) or len(exprs) != 1:
            continue
        actual = trusted_dims(exprs[0], types[0], ctx.api)
        if actual is None:
            continue
        alignment = align(formal_dims, actual, items_are_dims=True)
        origin = f"argument {formal_name}"
        if isinstance(alignment, str):
            message = (
                f'{where}: {origin} is "{format_dims(actual)}" but its parameter is annotated'
                f' "{format_dims(formal_dims)}"'
            )
            _report(ctx.api, message, ctx.context, codes.SHAPE)
            return with_dims(ctx.default_return_type, None, ctx.api)
        for formal_dim, actual_dim in alignment.pairs:
            problem = _bind_formal(formal_dim, actual_dim, origin, bindings)
            if problem is not None and not reported:
                # One conflict per call: the later ones are usually the same mistake.
                _report_problem(ctx.api, where, problem, ctx.context)
                reported = True
        variadic = next((d for d in formal_dims if isinstance(d, Variadic) and d.name), None)
        if isinstance(variadic, Variadic) and variadic.name and alignment.ellipsis is not None:
            variadics.setdefault(variadic.name, alignment.ellipsis)
    returned = annotated_dims(signature.ret_type)
    produced = _rename(returned, bindings, variadics) if returned is not None else None
    if reported:
        return with_dims(ctx.default_return_type, produced, ctx.api)
    return _finish(ctx, where, produced)


def _bind_formal(formal: object, actual: Dim, origin: str, bindings: Bindings) -> Problem | None:
    if isinstance(formal, Axis) and len(formal.factors) == 1 and formal.size == 1:
        return bindings.bind(formal.factors[0], actual, origin, noun="dim")
    both_fixed = isinstance(formal, Axis) and formal.is_fixed
    both_fixed = both_fixed and isinstance(actual, Axis) and actual.is_fixed
    if both_fixed and formal != actual:
        return Problem("shape", f'{origin} has "{actual}" where "{formal}" is expected')
    return None


def _rename(dims: Dims, bindings: Bindings, variadics: dict[str, Dims]) -> Dims:
    renamed: list[Dim] = []
    for dim in dims:
        if isinstance(dim, Variadic):
            renamed.extend(variadics.get(dim.name or "", (Variadic(None),)))
        elif isinstance(dim, Axis):
            axis: Dim = Axis((), dim.size)
            for factor in dim.factors:
                bound = bindings.dim_of(factor)
                axis = (
                    axis.times(bound)
                    if isinstance(axis, Axis) and isinstance(bound, Axis)
                    else Unknown()
                )
            renamed.append(axis)
        else:
            renamed.append(dim)
    return tuple(renamed)


# --------------------------------------------------------------------------- methods, modules


def _member(info: TypeInfo, name: str) -> tuple[TypeInfo, object] | None:
    for base in info.mro:
        symbol = base.names.get(name)
        if symbol is not None:
            return base, symbol.node
    return None


def _forward_signature(typ: object) -> CallableType | None:
    """The signature of a user module's ``forward``, when ``__call__`` is torch's."""
    if not isinstance(typ, Instance) or not typ.type.has_base(MODULE):
        return None
    call, forward = _member(typ.type, "__call__"), _member(typ.type, "forward")
    if call is None or forward is None or call[0].fullname != MODULE:
        return None
    if forward[0].fullname.startswith("torch."):
        return None  # only the user's modules: torch's own stubs are not ours to tighten
    return _signature_of(forward[1])


def module_call_signature(ctx: MethodSigContext) -> FunctionLike:
    """Check ``module(x)`` against ``forward``'s signature instead of ``Callable[..., Any]``."""
    signature = _forward_signature(ctx.type)
    if signature is None or not signature.arg_types:
        return ctx.default_signature
    return bind_self(signature, ctx.type)


def method_hook(method: str) -> Callable[[MethodContext], Type]:
    """Calls of ``method``: carry dims through the user's annotated methods, through
    ``module(x)`` (routed to ``forward``) and through ``@typed_flops`` functions."""

    def hook(ctx: MethodContext) -> Type:
        receiver = get_proper_type(ctx.type)
        if not isinstance(receiver, Instance) or not isinstance(ctx.context, CallExpr):
            return with_dims(ctx.default_return_type, None, ctx.api)
        target = _method_target(ctx.api, receiver, method, ctx.context.callee)
        if target is None:
            return with_dims(ctx.default_return_type, None, ctx.api)
        label, signature, drop_self = target
        if not _has_dims(signature) or (drop_self and signature.arg_kinds[:1] != [ARG_POS]):
            return with_dims(ctx.default_return_type, None, ctx.api)
        return _carry(ctx, signature, drop_self=drop_self, name=label)

    return hook


def _method_target(
    api: CheckerPluginInterface, receiver: Instance, method: str, callee: Expression
) -> tuple[str, CallableType, bool] | None:
    """(label, annotated signature, whether it takes self) of what a call really runs."""
    if method != "__call__":
        member = _member(receiver.type, method)
        if member is None:
            return None
        signature = _signature_of(member[1])
        static = isinstance(member[1], (Decorator, FuncDef)) and _func(member[1]).is_static
        label = f"{receiver.type.name}.{method}"
        return (label, signature, not static) if signature else None
    forward = _forward_signature(receiver)
    if forward is not None:
        return f"{receiver.type.name}.forward", forward, True
    # A callable object wrapping a function, e.g. what @typed_flops returns.
    if isinstance(callee, NameExpr) and isinstance(callee.node, Decorator):
        signature = _signature_of(callee.node)
        return (f"{callee.name}", signature, False) if signature else None
    if isinstance(callee, MemberExpr) and isinstance(api, TypeChecker):
        owner = get_proper_type(api.lookup_type_or_none(callee.expr))
        member = _member(owner.type, callee.name) if isinstance(owner, Instance) else None
        if member is not None and isinstance(member[1], Decorator):
            signature = _signature_of(member[1])
            static = member[1].func.is_static
            return (f"{callee.name}", signature, not static) if signature else None
    return None


def _func(node: Decorator | FuncDef) -> FuncDef:
    return node.func if isinstance(node, Decorator) else node


# --------------------------------------------------------------------------- @typed_flops(flops=)


def typed_flops_hook(ctx: FunctionContext) -> Type:
    """``@typed_flops(flops="...")``: the formula's grammar and the dims it names."""
    call = ctx.context
    formula = None
    for names, exprs in zip(ctx.arg_names, ctx.args, strict=True):
        for name, expr in zip(names, exprs, strict=True):
            if name == "flops":
                formula = _literal_str(expr)
    if formula is None or not isinstance(call, CallExpr):
        return ctx.default_return_type
    where = f'flops formula "{formula}"'
    try:
        used = formula_names(formula)
    except FormulaError as error:
        _report(ctx.api, f"{where}: {error}", call, codes.FLOPS_EXPR)
        return ctx.default_return_type
    known = _known_dims(ctx.api, call)
    if known is not None and used - known:
        unknown = ", ".join(sorted(used - known))
        listed = ", ".join(sorted(known)) or "none"
        message = f"{where} names unknown dim {unknown} (annotated dims: {listed})"
        _report(ctx.api, message, call, codes.FLOPS_EXPR)
    return ctx.default_return_type


def _known_dims(api: CheckerPluginInterface, decorator: CallExpr) -> set[str] | None:
    """Dim names the decorated function's annotations (and its class) define; None if unsure."""
    if not isinstance(api, TypeChecker):
        return None
    function, active = api.scope.current_function(), api.scope.active_class()
    if function is not None:
        statements = function.body.body
    elif active is not None:
        statements = active.defn.defs.body
    else:
        statements = api.tree.defs
    decorated = find_decorated(statements, decorator)
    signature = decorated.func.type if decorated else None
    if decorated is None or not isinstance(signature, CallableType):
        return None
    known: set[str] = set()
    for typ in (*signature.arg_types, signature.ret_type):
        dims = annotated_dims(typ)
        proper = get_proper_type(typ)
        if dims is None and is_tensor(proper):
            return None  # a tensor whose dims we could not read: stay silent
        if dims is not None:
            known |= named_dims(dims)
            known |= {"ellipsis"} if Variadic(None) in dims else set()
    info = decorated.func.info
    if info is not FUNC_NO_INFO:
        # Methods may use sizes bound from the module (`self.d_hidden`), so attributes count.
        for base in info.mro:
            if not base.fullname.startswith(("torch.", "builtins.")):
                known |= set(base.names)
    return known
