"""What a function body says about its names: returns, single assignments, decorators.

mypy gives plugin hooks the call being checked but not the statement around it, so the
plugin walks function bodies itself, once per body (cached). The walk is by hand:
subclassing ``mypy.traverser.TraverserVisitor`` inside a plugin crashes compiled mypy.

Caches are keyed on the body (the ``Block`` a parse creates), never on the function
object alone: the mypy daemon keeps a function's object across an edit and gives it the
new body, so a cache keyed on the function would answer for code that no longer exists.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from mypy.nodes import (
    AssignmentStmt,
    Block,
    CallExpr,
    ClassDef,
    Context,
    Decorator,
    DelStmt,
    Expression,
    ForStmt,
    FuncDef,
    FuncItem,
    GlobalDecl,
    IfStmt,
    MatchStmt,
    NameExpr,
    NonlocalDecl,
    OperatorAssignmentStmt,
    OverloadedFuncDef,
    ReturnStmt,
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


@dataclass
class FunctionFacts:
    """Facts about one function body, for checks that need more than the call itself."""

    returned: set[int] = field(default_factory=set)  # ids of expressions after `return`
    single_assignments: dict[str, Expression] = field(default_factory=dict)
    binding_counts: dict[str, int] = field(default_factory=dict)  # parameters count once

    def bound_once(self, name: str) -> bool:
        """Whether ``name`` is bound exactly once (as a parameter, or by one assignment)."""
        return self.binding_counts.get(name) == 1

    def returns(self, call: CallExpr) -> bool:
        """Whether ``call`` is returned: ``return call(...)``, or ``name = call(...)``
        where ``name`` is bound exactly once in the function and ``return name`` follows."""
        return id(call) in self.returned


def _lvalue_names(lvalue: Expression) -> Iterator[str]:
    if isinstance(lvalue, NameExpr):
        yield lvalue.name
    for item in getattr(lvalue, "items", ()):
        yield from _lvalue_names(item)


_FACTS: dict[int, tuple[Block, FunctionFacts]] = {}
_LIMIT = 20_000  # the daemon runs for days: keep the caches bounded


def function_facts(function: FuncItem) -> FunctionFacts:
    """The (cached per body) :class:`FunctionFacts` of ``function``."""
    body = function.body
    cached = _FACTS.get(id(body))
    if cached is not None and cached[0] is body:
        return cached[1]
    facts = FunctionFacts()
    binding_counts = facts.binding_counts
    binding_counts.update({arg.variable.name: 1 for arg in function.arguments})
    returned_names: list[str] = []
    uncertain = False
    for statement in iter_statements(body.body):
        names: list[str] = []
        if isinstance(statement, AssignmentStmt):
            for lvalue in statement.lvalues:
                names += _lvalue_names(lvalue)
            if len(statement.lvalues) == 1 and isinstance(statement.lvalues[0], NameExpr):
                facts.single_assignments[statement.lvalues[0].name] = statement.rvalue
        elif isinstance(statement, (OperatorAssignmentStmt, ForStmt)):
            names += _lvalue_names(
                statement.lvalue
                if isinstance(statement, OperatorAssignmentStmt)
                else statement.index
            )
        elif isinstance(statement, WithStmt):
            for target in statement.target:
                if target is not None:
                    names += _lvalue_names(target)
        elif isinstance(statement, (FuncDef, Decorator, OverloadedFuncDef, ClassDef)):
            names.append(statement.name)
        elif isinstance(statement, (GlobalDecl, NonlocalDecl)):
            names += [name for name in statement.names for _ in range(2)]
        elif isinstance(statement, TryStmt):
            names += [var.name for var in statement.vars if var is not None]
        elif isinstance(statement, DelStmt):
            names += _lvalue_names(statement.expr)
        elif isinstance(statement, MatchStmt):
            uncertain = True  # capture patterns bind names anywhere in a pattern
        elif isinstance(statement, ReturnStmt) and statement.expr is not None:
            facts.returned.add(id(statement.expr))
            if isinstance(statement.expr, NameExpr):
                returned_names.append(statement.expr.name)
        for name in names:
            binding_counts[name] = binding_counts.get(name, 0) + 1
    for name in returned_names:
        value = facts.single_assignments.get(name)
        if not uncertain and binding_counts.get(name) == 1 and isinstance(value, CallExpr):
            facts.returned.add(id(value))
    if uncertain:
        binding_counts.update(dict.fromkeys(binding_counts, 2))
    if len(_FACTS) > _LIMIT:
        _FACTS.clear()
    _FACTS[id(body)] = (body, facts)
    return facts


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
