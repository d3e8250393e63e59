"""Dims attached to mypy's tensor types, and which of them a check may trust.

Dims ride on ``Instance.extra_attrs``, which survives mypy's cache and dmypy and does not
change subtyping. Two attributes are used:

- :data:`ANNOTATED` -- written by the ``Annotated`` hook: a jaxtyping annotation's dim
  string, as written; its names belong to whichever function wrote the annotation;
- :data:`PRODUCED` -- written by the call hooks on a call's result, tagged with the scope
  (function) whose names it is written in.

A check only trusts dims written in the names of the function being checked: produced dims
of its own scope, and annotated dims of its own parameters and annotated locals. Anything
else (a callee's annotation leaking through an unhooked call, an attribute set in another
method) is ignored, which is what keeps the plugin free of false positives. A dim name that
no parameter of the function binds is free, as it is at runtime (jaxtyping binds it on
first use): in an annotated local or the return annotation it matches anything.
"""

from __future__ import annotations

from mypy.checker import TypeChecker
from mypy.nodes import LDEF, CallExpr, Expression, FuncItem, NameExpr, Var
from mypy.plugin import CheckerPluginInterface
from mypy.types import CallableType, Instance, LiteralType, ProperType, Type, get_proper_type

from .scopes import function_facts
from .static import UNKNOWN, Axis, Dim, Dims, Variadic, bindable_names, format_dims, parse_static

ANNOTATED = "__typedflops_dims__"
PRODUCED = "__typedflops_produced__"
TENSOR = "torch._tensor.Tensor"


def is_tensor(typ: ProperType) -> bool:
    """Whether ``typ`` is ``torch.Tensor`` or a subclass (``nn.Parameter``)."""
    return isinstance(typ, Instance) and typ.type.has_base(TENSOR)


def _literal(typ: Instance, name: str) -> str | None:
    if typ.extra_attrs is None:
        return None
    value = get_proper_type(typ.extra_attrs.attrs.get(name))
    return value.value if isinstance(value, LiteralType) and isinstance(value.value, str) else None


def annotation_text(typ: Type | None) -> str | None:
    """The dim string of the jaxtyping annotation that gave ``typ``, as written."""
    proper = get_proper_type(typ)
    return _literal(proper, ANNOTATED) if isinstance(proper, Instance) else None


def annotated_dims(typ: Type | None) -> Dims | None:
    """Dims a jaxtyping annotation gave ``typ`` (in the annotating function's names)."""
    text = annotation_text(typ)
    return parse_static(text) if text is not None else None


def bound_names(function: FuncItem) -> frozenset[str]:
    """The dim names the function's parameters bind (named and ``*name`` dims)."""
    signature = function.type
    if not isinstance(signature, CallableType):
        return frozenset()
    names: set[str] = set()
    for typ in signature.arg_types:
        text = annotation_text(typ)
        if text is not None:
            names |= bindable_names(text)
    return frozenset(names)


def without_free_names(dims: Dims, bound: frozenset[str]) -> Dims:
    """``dims`` with every dim name no parameter binds made unknown (it matches anything)."""
    kept: list[Dim] = []
    for dim in dims:
        if isinstance(dim, Axis) and not set(dim.factors) <= bound:
            kept.append(UNKNOWN)
        elif isinstance(dim, Variadic) and dim.name and dim.name not in bound:
            kept.append(Variadic(None))
        else:
            kept.append(dim)
    return tuple(kept)


def scope_tag(api: CheckerPluginInterface) -> str:
    """Names the function (or module) whose dim names the current expression uses."""
    if not isinstance(api, TypeChecker):
        return "?"
    function = api.scope.current_function()
    return api.tree.fullname if function is None else f"{function.fullname}:{function.line}"


def current_function(api: CheckerPluginInterface) -> FuncItem | None:
    """The function being checked, if any."""
    return api.scope.current_function() if isinstance(api, TypeChecker) else None


def trusted_dims(expr: Expression, typ: Type, api: CheckerPluginInterface) -> Dims | None:
    """Dims of ``expr`` written in the current function's names, or None (unknown).

    Trusted: a call's result produced in this scope; a name bound exactly once in this
    function (a parameter, an annotated local, a local assigned from a call) -- mypy keeps
    the first type of a name across rebinding, so a rebound name is never trusted.
    """
    proper = get_proper_type(typ)
    if not isinstance(proper, Instance) or proper.extra_attrs is None:
        return None
    if isinstance(expr, NameExpr):
        function = current_function(api)
        if function is None or expr.kind != LDEF or not isinstance(expr.node, Var):
            return None
        if not function_facts(function).bound_once(expr.name):
            return None
        is_parameter = any(arg.variable is expr.node for arg in function.arguments)
        if is_parameter:
            return _produced(proper, api) or annotated_dims(proper)
        if not expr.node.is_inferred:
            annotated = annotated_dims(proper)
            if annotated is not None:
                annotated = without_free_names(annotated, bound_names(function))
            return _produced(proper, api) or annotated
        return _produced(proper, api)
    return _produced(proper, api) if isinstance(expr, CallExpr) else None


def _produced(typ: Instance, api: CheckerPluginInterface) -> Dims | None:
    text = _literal(typ, PRODUCED)
    if text is None:
        return None
    scope, _, dims = text.partition("|")
    return parse_static(dims) if scope == scope_tag(api) else None


def with_dims(typ: Type, dims: Dims | None, api: CheckerPluginInterface) -> Type:
    """``typ`` carrying ``dims`` produced in the current scope (and no leaked annotation)."""
    proper = get_proper_type(typ)
    if not is_tensor(proper):
        return typ
    assert isinstance(proper, Instance)
    plain = proper.copy_modified()
    plain.extra_attrs = None
    if dims is None:
        return plain
    literal = LiteralType(
        f"{scope_tag(api)}|{format_dims(dims)}", api.named_generic_type("builtins.str", [])
    )
    return plain.copy_with_extra_attr(PRODUCED, literal)
