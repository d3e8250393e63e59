"""What every check shares: reporting a diagnostic, and checking a result against the
return annotation of the function it is returned from."""

from __future__ import annotations

from mypy.errorcodes import ErrorCode
from mypy.nodes import Context, Expression, StrExpr
from mypy.plugin import CheckerPluginInterface, FunctionContext, MethodContext
from mypy.types import CallableType, Type

from . import codes
from .flow import flow_of
from .scopes import decompositions_before
from .shapes import Fact, Finding, check_produced
from .static import Dims, format_dims
from .tensors import (
    annotated_dims,
    annotation_text,
    bound_names,
    current_function,
    plain,
    without_free_names,
)
from .values import Result, record

__all__ = ["finish", "keep", "literal_str", "report", "report_finding"]


def report(api: CheckerPluginInterface, message: str, context: Context, code: ErrorCode) -> None:
    """One diagnostic with the plugin's error ``code``."""
    api.fail(message, context, code=code)


def report_finding(
    api: CheckerPluginInterface, where: str, finding: Finding, context: Context
) -> None:
    """A :class:`Finding` as a ``shape`` or ``dim-alias`` diagnostic."""
    code = codes.SHAPE if finding.severity == "shape" else codes.DIM_ALIAS
    report(api, f"{where}: {finding.message}", context, code)


def literal_str(expr: Expression) -> str | None:
    """The value of a string literal argument, or None."""
    return expr.value if isinstance(expr, StrExpr) else None


def keep(ctx: FunctionContext | MethodContext, produced: Dims | None) -> Type:
    """Keep ``produced`` as the dims of this call's value; give mypy its plain type."""
    record(ctx.api, ctx.context, Result(dims=produced) if produced is not None else None)
    return plain(ctx.default_return_type)


def finish(
    ctx: FunctionContext | MethodContext, what: str, produced: Dims | None, facts: list[Fact]
) -> Type:
    """Check ``produced`` against the enclosing function's return, then keep it."""
    if produced is not None and isinstance(ctx.context, Expression):
        _check_return(ctx.api, ctx.context, what, produced, facts)
    return keep(ctx, produced)


def _check_return(
    api: CheckerPluginInterface, call: Expression, what: str, produced: Dims, facts: list[Fact]
) -> None:
    function = current_function(api)
    if function is None or not isinstance(function.type, CallableType):
        return
    annotated = annotated_dims(function.type.ret_type)
    if annotated is None or not flow_of(function).returns(call):
        return
    # Return dims that no parameter binds are bound by the result itself, as at runtime.
    free = without_free_names(annotated, bound_names(function))
    known = [*decompositions_before(function, call), *facts]
    finding = check_produced(produced, free, known)
    if finding is not None:
        message = (
            f'{what} returns "{format_dims(produced)}" but {function.name}() is annotated'
            f' "{annotation_text(function.type.ret_type)}": {finding.message}'
        )
        code = codes.SHAPE if finding.severity == "shape" else codes.DIM_ALIAS
        report(api, message, call, code)
