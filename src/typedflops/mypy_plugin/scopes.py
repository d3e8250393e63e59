"""Walking a function body's statements, the decompositions its patterns establish, and
the definition a decorator belongs to.

mypy gives plugin hooks the call being checked but not the statement around it, so the
plugin walks function bodies itself. The walk is by hand: subclassing
``mypy.traverser.TraverserVisitor`` inside a plugin crashes compiled mypy.

Tables are keyed on the body (the ``Block`` a parse creates), never on the function
object alone: the mypy daemon keeps a function's object across an edit and gives it the
new body, so a table keyed on the function would answer for code that no longer exists.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from mypy.nodes import (
    Block,
    Context,
    Decorator,
    Expression,
    ForStmt,
    FuncItem,
    IfStmt,
    MatchStmt,
    OverloadedFuncDef,
    Statement,
    TryStmt,
    WhileStmt,
    WithStmt,
)

from .shapes import Fact


def iter_statements(statements: list[Statement]) -> Iterator[Statement]:
    """Every statement, nested blocks included, nested defs' bodies excluded."""
    for statement in statements:
        yield statement
        for child in _child_blocks(statement):
            yield from iter_statements(child.body)


def _child_blocks(statement: Statement) -> list[Block]:
    if isinstance(statement, IfStmt):
        return [*statement.body, *([statement.else_body] if statement.else_body else [])]
    if isinstance(statement, (ForStmt, WhileStmt)):
        return [statement.body, *([statement.else_body] if statement.else_body else [])]
    if isinstance(statement, WithStmt):
        return [statement.body]
    if isinstance(statement, TryStmt):
        optional = [statement.else_body, statement.finally_body]
        return [statement.body, *statement.handlers, *(block for block in optional if block)]
    if isinstance(statement, MatchStmt):
        return list(statement.bodies)
    if isinstance(statement, Block):
        return [statement]
    return []


_LIMIT = 20_000  # the daemon runs for days: keep the caches bounded


# Decompositions that patterns established, per body and per call (by position), so a
# check consults only those of calls before it: the checker visits a body in order, so
# each of them was recorded again in the current pass before it is read.
_DECOMPOSITIONS: dict[int, tuple[Block, dict[tuple[int, int], tuple[Fact, ...]]]] = {}


def _position(call: Context) -> tuple[int, int]:
    return (call.line, call.column)


def _calls_of(function: FuncItem) -> dict[tuple[int, int], tuple[Fact, ...]]:
    body = function.body
    entry = _DECOMPOSITIONS.get(id(body))
    if entry is None or entry[0] is not body:
        if len(_DECOMPOSITIONS) > _LIMIT:
            _DECOMPOSITIONS.clear()
        entry = (body, {})
        _DECOMPOSITIONS[id(body)] = entry
    return entry[1]


def record_decompositions(function: FuncItem, call: Context, facts: Sequence[Fact]) -> None:
    """Remember what the pattern of ``call`` (in ``function``) split (replacing what an
    earlier pass over the same body recorded for it)."""
    calls = _calls_of(function)
    if facts:
        calls[_position(call)] = tuple(facts)
    else:
        calls.pop(_position(call), None)


def decompositions_before(function: FuncItem, call: Context) -> list[Fact]:
    """The decompositions recorded by calls that come before ``call`` in ``function``."""
    here = _position(call)
    calls = _calls_of(function)
    return [fact for position, facts in calls.items() if position < here for fact in facts]


def find_decorated(statements: list[Statement], decorator: Expression) -> Decorator | None:
    """The decorated definition among ``statements`` whose decorator list holds ``decorator``."""
    for statement in iter_statements(statements):
        if isinstance(statement, Decorator) and any(d is decorator for d in statement.decorators):
            return statement
        if isinstance(statement, OverloadedFuncDef):
            for item in statement.items:
                if isinstance(item, Decorator) and any(d is decorator for d in item.decorators):
                    return item
    return None
