"""What one statement does by its syntax alone: the names it binds, the expressions it
runs itself, the names a ``global``/``nonlocal`` declaration takes from a function, and
whether a ``with`` statement's block always runs to its end.

The flow pass (:mod:`.flow`) reads these to tell which names a block, a loop or a ``try``
may rebind without running it. :func:`statement_names` and :func:`expressions_of` look at
one statement's own fields, never inside its nested blocks
(:func:`.scopes.iter_statements` walks those).
"""

from __future__ import annotations

from collections.abc import Iterator

from mypy import nodes
from mypy.nodes import (
    AssignmentStmt,
    CallExpr,
    Expression,
    FuncItem,
    MemberExpr,
    NameExpr,
    ReturnStmt,
    Statement,
    TupleExpr,
)

from .scopes import iter_statements

__all__ = [
    "declared_elsewhere",
    "expressions_of",
    "imported_names",
    "plain_context",
    "statement_names",
    "target_names",
]

# Context managers whose block always runs to its end when nothing raises.
PLAIN_CONTEXTS = frozenset(
    {"no_grad", "enable_grad", "inference_mode", "set_grad_enabled", "autocast", "nullcontext"}
)


def target_names(target: Expression) -> Iterator[str]:
    """The names an assignment target binds (attributes and subscripts bind none)."""
    if isinstance(target, NameExpr):
        yield target.name
    elif isinstance(target, (TupleExpr, nodes.ListExpr)):
        for item in target.items:
            yield from target_names(item)
    elif isinstance(target, nodes.StarExpr):
        yield from target_names(target.expr)


def imported_names(statement: nodes.ImportBase) -> Iterator[str]:
    if isinstance(statement, nodes.Import):
        for module, alias in statement.ids:
            yield alias or module.split(".")[0]
    elif isinstance(statement, nodes.ImportFrom):
        for name, alias in statement.names:
            yield alias or name


def statement_names(statement: Statement) -> Iterator[str]:
    """The names one statement binds by its own syntax (not in its expressions)."""
    if isinstance(statement, AssignmentStmt):
        for lvalue in statement.lvalues:
            yield from target_names(lvalue)
            if isinstance(lvalue, MemberExpr) and lvalue.name == "data":
                yield from target_names(lvalue.expr)
    elif isinstance(statement, nodes.OperatorAssignmentStmt):
        yield from target_names(statement.lvalue)
    elif isinstance(statement, nodes.ForStmt):
        yield from target_names(statement.index)
    elif isinstance(statement, nodes.WithStmt):
        for target in statement.target:
            if target is not None:
                yield from target_names(target)
    elif isinstance(statement, nodes.TryStmt):
        yield from (var.name for var in statement.vars if var is not None)
    elif isinstance(statement, nodes.DelStmt):
        yield from target_names(statement.expr)
    elif isinstance(
        statement, (nodes.FuncDef, nodes.Decorator, nodes.OverloadedFuncDef, nodes.ClassDef)
    ):
        yield statement.name
    elif isinstance(statement, nodes.ImportBase):
        yield from imported_names(statement)
    elif isinstance(statement, (nodes.GlobalDecl, nodes.NonlocalDecl)):
        yield from statement.names


def expressions_of(statement: Statement) -> list[Expression | None]:
    """The expressions one statement runs itself (its blocks' statements excluded)."""
    if isinstance(statement, AssignmentStmt):
        return [statement.rvalue, *statement.lvalues]
    if isinstance(statement, nodes.OperatorAssignmentStmt):
        return [statement.rvalue, statement.lvalue]
    if isinstance(statement, (nodes.ExpressionStmt, ReturnStmt, nodes.DelStmt)):
        return [statement.expr]
    if isinstance(statement, nodes.IfStmt):
        return list(statement.expr)
    if isinstance(statement, nodes.WhileStmt):
        return [statement.expr]
    if isinstance(statement, nodes.ForStmt):
        return [statement.expr]
    if isinstance(statement, nodes.WithStmt):
        return list(statement.expr)
    if isinstance(statement, nodes.AssertStmt):
        return [statement.expr, statement.msg]
    if isinstance(statement, nodes.RaiseStmt):
        return [statement.expr, statement.from_expr]
    if isinstance(statement, nodes.TryStmt):
        return list(statement.types)
    if isinstance(statement, (nodes.FuncDef, nodes.Decorator)):
        func = statement.func if isinstance(statement, nodes.Decorator) else statement
        decorators = statement.decorators if isinstance(statement, nodes.Decorator) else []
        return [*decorators, *(argument.initializer for argument in func.arguments)]
    if isinstance(statement, nodes.ClassDef):
        return [*statement.decorators, *statement.base_type_exprs]
    return []


def declared_elsewhere(function: FuncItem) -> set[str]:
    """Names a ``global``/``nonlocal`` statement here or in a nested function declares."""
    names: set[str] = set()
    pending: list[list[Statement]] = [function.body.body]
    while pending:
        for statement in iter_statements(pending.pop()):
            if isinstance(statement, (nodes.GlobalDecl, nodes.NonlocalDecl)):
                names.update(statement.names)
            elif isinstance(statement, nodes.FuncDef):
                pending.append(statement.body.body)
            elif isinstance(statement, nodes.Decorator):
                pending.append(statement.func.body.body)
    return names


def plain_context(expr: Expression) -> bool:
    """Whether ``expr``, a ``with`` item, is a context manager that never swallows an
    exception (``torch.no_grad()``, ``autocast(...)``)."""
    callee = expr.callee if isinstance(expr, CallExpr) else expr
    return isinstance(callee, (NameExpr, MemberExpr)) and callee.name in PLAIN_CONTEXTS
