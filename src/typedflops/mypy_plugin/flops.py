"""The ``flops=`` check: a ``@typed_flops(flops="...")`` formula's grammar and dim names.

The formula is parsed by the grammar core, so a mistake reads as typedflops' runtime
``SpecError`` reads at decoration; names that no annotation of the decorated function
uses are reported as the runtime reports them (methods are left to the runtime, which
binds their sizes from the module).
"""

from __future__ import annotations

from mypy.checker import TypeChecker
from mypy.nodes import FUNC_NO_INFO, CallExpr
from mypy.plugin import CheckerPluginInterface, FunctionContext
from mypy.types import CallableType, Type, get_proper_type

from ..syntax import Problem
from ..syntax.formula import parse_formula, shorten
from ..syntax.symbolic import negative_for_every_size, to_sympy
from . import codes
from .report import literal_str, report
from .scopes import find_decorated
from .static import annotation_names
from .tensors import annotation_text, is_tensor

__all__ = ["typed_flops_hook"]


def typed_flops_hook(ctx: FunctionContext) -> Type:
    """``@typed_flops(flops="...")``: the formula's grammar and the dims it names."""
    call = ctx.context
    formula = name = None
    for names, exprs in zip(ctx.arg_names, ctx.args, strict=True):
        for arg_name, expr in zip(names, exprs, strict=True):
            if arg_name == "flops":
                formula = literal_str(expr)
            elif arg_name == "name":
                name = literal_str(expr)
    if formula is None or not isinstance(call, CallExpr):
        return ctx.default_return_type
    try:
        parsed = parse_formula(formula)
        negative = negative_for_every_size(to_sympy(parsed.tree))
    except Problem as problem:
        message = f"flops= {shorten(formula)!r}: {problem.reason}"
        report(ctx.api, message, call, codes.FLOPS_EXPR)
        return ctx.default_return_type
    decorated = _decorated(ctx.api, call)
    if decorated is None:
        return ctx.default_return_type
    function_name, known = decorated
    unknown = sorted(parsed.names - known)
    label = name or function_name
    if unknown:
        shown = ", ".join(sorted(known)) or "none"
        message = (
            f"{label}(): flops={formula!r} names {', '.join(unknown)}, which no annotation "
            f"of {label} binds (its dims: {shown})"
        )
        report(ctx.api, message, call, codes.FLOPS_EXPR)
    elif negative:  # (as the runtime: after the names)
        message = (
            f"{label}(): flops={formula!r} is negative for every size; a count of FLOPs never is"
        )
        report(ctx.api, message, call, codes.FLOPS_EXPR)
    return ctx.default_return_type


def _decorated(api: CheckerPluginInterface, decorator: CallExpr) -> tuple[str, set[str]] | None:
    """The decorated function's name and the dim names its annotations use; None if unsure
    (a tensor whose dims could not be read, or a method)."""
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
    if decorated.func.info is not FUNC_NO_INFO and not decorated.func.is_static:
        return None  # a method: the runtime binds its sizes from the module too
    known: set[str] = set()
    for typ in (*signature.arg_types, signature.ret_type):
        text = annotation_text(typ)
        if text is None and is_tensor(get_proper_type(typ)):
            return None  # a tensor whose dims we could not read: stay silent
        if text is not None:
            known |= annotation_names(text)
    qualname = decorated.func.name
    return qualname, known
