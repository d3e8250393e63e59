"""The call checks: dims carried through calls of the user's own annotated functions,
methods (classmethods and staticmethods included), ``nn.Module`` calls (checked against
``forward``) and ``@typed_flops`` functions.

The callee's dims are bound to the arguments' dims (a conflict is reported), and its
return dims are renamed into the caller's names. The call's type is mypy's own: a module
call stays ``Any``, as plain mypy types it, so no ordinary mypy error appears that plain
mypy would not report (unless the ``typed_module_calls`` setting asks for ``forward``'s
types, see :mod:`.settings`). :func:`function_has_dims` and :func:`method_has_dims` tell the
plugin which calls to hook at all, so every other call keeps mypy's default hooks.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.argmap import map_actuals_to_formals
from mypy.checker import TypeChecker
from mypy.nodes import (
    ARG_NAMED,
    ARG_NAMED_OPT,
    ARG_OPT,
    ARG_POS,
    ARG_STAR,
    ARG_STAR2,
    CallExpr,
    Decorator,
    Expression,
    FuncDef,
    MemberExpr,
    NameExpr,
    RefExpr,
    SymbolNode,
    TypeInfo,
    Var,
)
from mypy.plugin import CheckerPluginInterface, FunctionContext, MethodContext, MethodSigContext
from mypy.typeops import bind_self
from mypy.types import (
    AnyType,
    CallableType,
    FunctionLike,
    Instance,
    ProperType,
    Type,
    TypeOfAny,
    TypeType,
    TypeVarType,
    get_proper_type,
)

from . import codes
from .report import finish, keep, report, report_finding
from .shapes import Bindings, Finding, align
from .static import UNKNOWN, Axis, Dim, Dims, Variadic, format_dims
from .tensors import alternatives, annotated_dims, annotation_label, annotation_text
from .values import declared_alternatives, declared_label, dims_of

__all__ = [
    "forward_of",
    "function_has_dims",
    "method_has_dims",
    "method_hook",
    "module_call_signature",
    "user_function_hook",
]

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
        "builtins.classmethod",
    }
)


def _keeps_signature(decorator: Expression) -> bool:
    target = decorator.callee if isinstance(decorator, CallExpr) else decorator
    if isinstance(target, RefExpr) and target.fullname in SIGNATURE_KEEPING:
        return True
    if isinstance(decorator, CallExpr):  # a factory: what it returns must pass through
        return _passes_through(_returned_by(decorator.callee))
    return _passes_through(_declared_type(decorator))


def _declared_type(expr: Expression) -> Type | None:
    """The declared type of a name a decorator refers to (no inference)."""
    node = expr.node if isinstance(expr, RefExpr) else None
    if isinstance(node, FuncDef):
        return node.type
    if isinstance(node, Decorator):
        return node.var.type
    if isinstance(node, Var):
        return node.type
    return None


def _returned_by(factory: Expression) -> Type | None:
    """What calling ``factory`` gives: a function's return type, or an instance of a class."""
    node = factory.node if isinstance(factory, RefExpr) else None
    if isinstance(node, TypeInfo):
        return Instance(node, [])
    declared = get_proper_type(_declared_type(factory))
    return declared.ret_type if isinstance(declared, CallableType) else None


def _passes_through(typ: Type | None) -> bool:
    """Whether a decorator of this type gives back what it gets: ``(F) -> F`` for a type
    variable F, ``(Callable[P, R]) -> Callable[P, R]``, or an object whose ``__call__`` is
    one of these (``@torch.no_grad()``)."""
    proper = get_proper_type(typ)
    if isinstance(proper, Instance):
        call = _member(proper.type, "__call__")
        method = _func(call[1]) if call else None
        if method is None or not isinstance(method.type, CallableType):
            return False
        proper = bind_self(method.type, proper)
    if not isinstance(proper, CallableType) or not proper.arg_kinds:
        return False
    required = [kind for kind in proper.arg_kinds if kind in (ARG_POS, ARG_NAMED)]
    if proper.arg_kinds[0] != ARG_POS or len(required) != 1:
        return False
    given, returned = get_proper_type(proper.arg_types[0]), get_proper_type(proper.ret_type)
    if isinstance(given, TypeVarType) and isinstance(returned, TypeVarType):
        return given.id == returned.id
    if isinstance(given, CallableType) and isinstance(returned, CallableType):
        given_spec, returned_spec = given.param_spec(), returned.param_spec()
        given_ret, returned_ret = (
            get_proper_type(given.ret_type),
            get_proper_type(returned.ret_type),
        )
        return (
            given_spec is not None
            and returned_spec is not None
            and given_spec.id == returned_spec.id
            and len(given.arg_types) == len(returned.arg_types) == 2
            and isinstance(given_ret, TypeVarType)
            and isinstance(returned_ret, TypeVarType)
            and given_ret.id == returned_ret.id
        )
    return False


def _func(node: object) -> FuncDef | None:
    if isinstance(node, Decorator):
        return node.func
    return node if isinstance(node, FuncDef) else None


def _signature_of(node: object) -> CallableType | None:
    """The annotated signature a call of ``node`` is checked against, if it is certain."""
    if isinstance(node, Decorator) and all(_keeps_signature(d) for d in node.original_decorators):
        node = node.func
    if isinstance(node, FuncDef) and isinstance(node.type, CallableType):
        return node.type
    return None


def _has_dims(signature: CallableType | None) -> bool:
    if signature is None:
        return False
    return any(alternatives(t) for t in (*signature.arg_types, signature.ret_type))


def _member(info: TypeInfo, name: str) -> tuple[TypeInfo, SymbolNode | None] | None:
    for base in info.mro:
        symbol = base.names.get(name)
        if symbol is not None:
            return base, symbol.node
    return None


def forward_of(info: TypeInfo) -> CallableType | None:
    """The signature of a user module's ``forward``, when ``__call__`` is torch's."""
    if not info.has_base(MODULE):
        return None
    call, forward = _member(info, "__call__"), _member(info, "forward")
    if call is None or forward is None or call[0].fullname != MODULE:
        return None
    if forward[0].fullname.startswith("torch."):
        return None  # only the user's modules: torch's own stubs are not ours to read
    return _signature_of(forward[1])


def function_has_dims(node: SymbolNode | None) -> bool:
    """Whether calls of ``node`` (a function) carry dims the plugin should check."""
    return _has_dims(_signature_of(node))


def method_has_dims(info: TypeInfo, method: str) -> bool:
    """Whether calls of ``info.method`` (``__call__``: of the module's ``forward``) carry dims."""
    if method == "__call__" and _has_dims(forward_of(info)):
        return True
    member = _member(info, method)
    return member is not None and _has_dims(_signature_of(member[1]))


def module_call_signature(ctx: MethodSigContext) -> FunctionLike:
    """``module(x)`` typed by ``forward`` (the ``typed_module_calls`` setting)."""
    receiver = get_proper_type(ctx.type)
    forward = forward_of(receiver.type) if isinstance(receiver, Instance) else None
    if forward is None or not forward.arg_types:
        return ctx.default_signature
    return bind_self(forward, ctx.type)


def user_function_hook(ctx: FunctionContext) -> Type:
    """A call of the user's own annotated function: bind its dims, rename its result."""
    call = ctx.context
    callee = call.callee if isinstance(call, CallExpr) else None
    signature = _signature_of(callee.node) if isinstance(callee, RefExpr) else None
    if signature is None or not _has_dims(signature):
        return ctx.default_return_type
    return _carry(ctx, signature, drop_first=False, name=signature.name or "function")


def _carry(
    ctx: FunctionContext | MethodContext, signature: CallableType, *, drop_first: bool, name: str
) -> Type:
    """Bind the callee's dims to the arguments', report conflicts, return renamed dims."""
    start = 1 if drop_first else 0
    formal_types = signature.arg_types[start:]
    formal_kinds = signature.arg_kinds[start:]
    formal_names = signature.arg_names[start:]
    call = ctx.context
    if not isinstance(call, CallExpr):
        return keep(ctx, None)
    # The call's own arguments, mapped onto the callee's parameters: the type mypy checks
    # the call against may be another signature (a module's untyped __call__).
    type_of = {
        id(expr): typ
        for exprs, types in zip(ctx.args, ctx.arg_types, strict=True)
        for expr, typ in zip(exprs, types, strict=True)
    }
    mapping = map_actuals_to_formals(
        call.arg_kinds,
        call.arg_names,
        formal_kinds,
        formal_names,
        lambda index: type_of.get(id(call.args[index]), AnyType(TypeOfAny.special_form)),
    )
    where = f"{name}()"
    bindings = Bindings()
    variadics: dict[str, Dims] = {}
    reported = False
    for formal, kind, formal_name, actuals in zip(
        formal_types, formal_kinds, formal_names, mapping, strict=True
    ):
        if any(call.arg_kinds[index] in (ARG_STAR, ARG_STAR2) for index in actuals):
            continue  # *args or **kwargs: which tensor lands here is not known
        if kind not in (ARG_POS, ARG_OPT, ARG_NAMED, ARG_NAMED_OPT) or len(actuals) != 1:
            continue
        expr = call.args[actuals[0]]
        origin = f"argument {formal_name}"
        formal_dims = annotated_dims(formal)
        if formal_dims is None:
            if _fits_no_alternative(ctx, expr, formal, f"{where}: {origin}"):
                return keep(ctx, None)
            continue
        actual = dims_of(expr, ctx.api)
        if actual is None:
            if _fits_no_alternative(ctx, expr, formal, f"{where}: {origin}"):
                return keep(ctx, None)
            continue
        alignment = align(formal_dims, actual, items_are_dims=True)
        if isinstance(alignment, str):
            message = (
                f'{where}: {origin} is "{format_dims(actual)}" but its parameter is annotated'
                f' "{annotation_text(formal)}"'
            )
            report(ctx.api, message, ctx.context, codes.SHAPE)
            return keep(ctx, None)
        for formal_dim, actual_dim in alignment.pairs:
            finding = _bind_formal(formal_dim, actual_dim, origin, bindings)
            if finding is not None and not reported:
                # One conflict per call: the later ones are usually the same mistake.
                report_finding(ctx.api, where, finding, ctx.context)
                reported = True
        variadic = next((d for d in formal_dims if isinstance(d, Variadic) and d.name), None)
        if isinstance(variadic, Variadic) and variadic.name and alignment.ellipsis is not None:
            variadics.setdefault(variadic.name, alignment.ellipsis)
    if reported:
        return keep(ctx, None)  # the result's dims would be a guess
    returned = annotated_dims(signature.ret_type)
    produced = _rename(returned, bindings, variadics) if returned is not None else None
    return finish(ctx, where, produced, [])


def _fits_no_alternative(
    ctx: FunctionContext | MethodContext, expr: Expression, formal: Type, where: str
) -> bool:
    """Report (and return True) when no tensor the argument may be has a rank that one of
    the tensors its parameter allows has: a union on either side, spelled with its dims."""
    formal_options = alternatives(formal)
    actual_options = declared_alternatives(expr, ctx.api)
    if actual_options is None:
        actual = dims_of(expr, ctx.api)
        actual_options = [actual] if actual is not None else None
    if not formal_options or not actual_options:
        return False
    if len(formal_options) == 1 and len(actual_options) == 1:
        return False  # a single tensor each: the caller checks it dim by dim
    if any(
        not isinstance(align(option, actual, items_are_dims=True), str)
        for option in formal_options
        for actual in actual_options
    ):
        return False
    if len(actual_options) > 1:
        shown = declared_label(expr, ctx.api) or "a union"
    else:
        shown = f'"{format_dims(actual_options[0])}"'
    expected = annotation_label(formal) if len(formal_options) > 1 else None
    expected = expected or f'"{format_dims(formal_options[0])}"'
    message = f"{where} is {shown} but its parameter is annotated {expected}"
    report(ctx.api, message, ctx.context, codes.SHAPE)
    return True


def _bind_formal(formal: object, actual: Dim, origin: str, bindings: Bindings) -> Finding | None:
    if isinstance(formal, Axis) and len(formal.factors) == 1 and formal.size == 1:
        return bindings.bind(formal.factors[0], actual, origin, noun="dim")
    both_fixed = isinstance(formal, Axis) and formal.is_fixed
    both_fixed = both_fixed and isinstance(actual, Axis) and actual.is_fixed
    if both_fixed and formal != actual:
        return Finding("shape", f'{origin} has "{actual}" where "{formal}" is expected')
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
                    else UNKNOWN
                )
            renamed.append(axis)
        else:
            renamed.append(dim)
    return tuple(renamed)


def _receiver_class(receiver: ProperType) -> tuple[TypeInfo, bool] | None:
    """The class a call goes through, and whether it is the class object itself."""
    if isinstance(receiver, Instance):
        return receiver.type, False
    if isinstance(receiver, TypeType) and isinstance(receiver.item, Instance):
        return receiver.item.type, True
    if isinstance(receiver, CallableType) and receiver.is_type_obj():
        return receiver.type_object(), True
    return None


def method_hook(method: str) -> Callable[[MethodContext], Type]:
    """Calls of ``method``: carry dims through the user's annotated methods (on instances
    and on classes), through ``module(x)`` (checked against ``forward``) and through
    ``@typed_flops`` functions."""

    def hook(ctx: MethodContext) -> Type:
        found = _receiver_class(get_proper_type(ctx.type))
        if found is None or not isinstance(ctx.context, CallExpr):
            return ctx.default_return_type
        target = _method_target(ctx.api, found, method, ctx.context.callee)
        if target is None:
            return ctx.default_return_type
        label, signature, drop_first = target
        if not _has_dims(signature) or (drop_first and signature.arg_kinds[:1] != [ARG_POS]):
            return ctx.default_return_type
        return _carry(ctx, signature, drop_first=drop_first, name=label)

    return hook


def _method_target(
    api: CheckerPluginInterface,
    receiver: tuple[TypeInfo, bool],
    method: str,
    callee: Expression,
) -> tuple[str, CallableType, bool] | None:
    """(label, annotated signature, whether its first parameter is bound) of what a call
    really runs."""
    info, on_class = receiver
    if method != "__call__":
        member = _member(info, method)
        function = _func(member[1]) if member else None
        signature = _signature_of(member[1]) if member else None
        if function is None or signature is None:
            return None
        # An instance binds self; a classmethod binds cls either way; a staticmethod
        # binds nothing, and a plain method called on the class takes self explicitly.
        bound = function.is_class or (not function.is_static and not on_class)
        return f"{info.name}.{method}", signature, bound
    forward = forward_of(info) if not on_class else None
    if forward is not None:
        return f"{info.name}.forward", forward, True
    # A callable object wrapping a function, e.g. what @typed_flops returns.
    if isinstance(callee, NameExpr) and isinstance(callee.node, Decorator):
        signature = _signature_of(callee.node)
        return (f"{callee.name}", signature, False) if signature else None
    if isinstance(callee, MemberExpr) and isinstance(api, TypeChecker):
        owner_type = get_proper_type(api.lookup_type_or_none(callee.expr))
        owner = _receiver_class(owner_type) if owner_type is not None else None
        member = _member(owner[0], callee.name) if owner is not None else None
        if owner is not None and member is not None and isinstance(member[1], Decorator):
            signature = _signature_of(member[1])
            func = member[1].func
            bound = func.is_class or (not func.is_static and not owner[1])
            return (f"{callee.name}", signature, bound) if signature else None
    return None
