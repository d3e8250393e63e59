"""What a check knows about the dims of an argument expression, in the names of the
function being checked.

Known, and nothing else (everything else is unknown, which is what keeps the plugin free
of false positives):

- a call the plugin models, checked earlier in this pass over the body: its result is
  kept in a table beside the types (:func:`record`), keyed on the call;
- a local name, through the binding the flow pass (:mod:`.flow`) says certainly reaches
  it: a parameter's annotation; an assignment's value (a modelled call, another such name,
  an attribute below), or its annotation when it has one and its value is unknown; one
  item of a tuple target (``packed, ps = pack(...)``; ``q, k, v = <tensor>`` takes the
  first axis apart);
- ``self.attr`` in a method, when the class annotates the attribute with dims (in the
  class body or in ``__init__``) and the method never assigns it.

Annotated locals and attributes name dims in their own words: in a local, a name that no
parameter binds matches anything, as at runtime; in an attribute that shares no name with
the method's own annotations, every name matches anything (a class may call
``n_features`` what its method calls ``features``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mypy.nodes import (
    ARG_NAMED,
    ARG_NAMED_OPT,
    ARG_OPT,
    ARG_POS,
    FUNC_NO_INFO,
    AssignmentStmt,
    Block,
    CallExpr,
    Context,
    Decorator,
    DelStmt,
    Expression,
    FuncDef,
    FuncItem,
    MemberExpr,
    NameExpr,
    OperatorAssignmentStmt,
    RefExpr,
    TypeInfo,
)
from mypy.plugin import CheckerPluginInterface
from mypy.types import CallableType, Type

from .flow import Assigned, Binding, Parameter, flow_of
from .scopes import iter_statements
from .static import Axis, Dims, Variadic
from .tensors import (
    alternatives,
    annotated_dims,
    annotation_label,
    bound_names,
    current_function,
    without_free_names,
)

__all__ = [
    "Result",
    "declared_alternatives",
    "declared_label",
    "dims_of",
    "record",
    "result_of",
]


@dataclass(frozen=True)
class Result:
    """The dims of a call's value: a tensor's (``dims``), a tuple's items (``items``), or
    those every item of a list has (``each``)."""

    dims: Dims | None = None
    items: tuple[Dims | None, ...] | None = None
    each: Dims | None = None

    def item(self, index: int) -> Dims | None:
        """The dims of ``value[index]`` (iterating a tensor walks its first axis)."""
        if self.items is not None:
            return self.items[index] if index < len(self.items) else None
        if self.each is not None:
            return self.each
        if self.dims and not isinstance(self.dims[0], Variadic):
            return self.dims[1:]
        return None


_RESULTS: dict[int, tuple[Block, dict[int, tuple[Context, Result]]]] = {}
_LIMIT = 20_000  # the daemon runs for days: keep the table bounded


def _table(function: FuncItem) -> dict[int, tuple[Context, Result]]:
    body = function.body
    entry = _RESULTS.get(id(body))
    if entry is None or entry[0] is not body:
        if len(_RESULTS) > _LIMIT:
            _RESULTS.clear()
        entry = (body, {})
        _RESULTS[id(body)] = entry
    return entry[1]


def record(api: CheckerPluginInterface, call: Context, result: Result | None) -> None:
    """Keep what ``call`` produced in this pass (None forgets an earlier pass's)."""
    function = current_function(api)
    if function is None:
        return
    table = _table(function)
    if result is None:
        table.pop(id(call), None)
    else:
        table[id(call)] = (call, result)


def result_of(function: FuncItem, call: Expression) -> Result | None:
    """What a modelled ``call`` in ``function`` produced, if it was checked."""
    entry = _table(function).get(id(call))
    return entry[1] if entry is not None and entry[0] is call else None


def dims_of(expr: Expression, api: CheckerPluginInterface) -> Dims | None:
    """The dims of ``expr`` in the current function's names, or None (unknown)."""
    function = current_function(api)
    return _value(function, expr, 0).dims if function is not None else None


def _declared(expr: Expression, api: CheckerPluginInterface) -> Type | None:
    """The declared type of a parameter ``expr`` reads (None for anything else)."""
    function = current_function(api)
    if function is None or not isinstance(expr, NameExpr):
        return None
    binding = flow_of(function).binding(expr)
    signature = function.type
    if not isinstance(binding, Parameter) or not isinstance(signature, CallableType):
        return None
    if function.arguments[binding.index].kind not in (ARG_POS, ARG_OPT, ARG_NAMED, ARG_NAMED_OPT):
        return None
    return signature.arg_types[binding.index]


def declared_alternatives(expr: Expression, api: CheckerPluginInterface) -> list[Dims] | None:
    """The dims of each tensor a parameter declared as a union may be (None otherwise)."""
    found = alternatives(_declared(expr, api))
    return found if found is not None and len(found) > 1 else None


def declared_label(expr: Expression, api: CheckerPluginInterface) -> str | None:
    """A parameter's declared union as a message spells it."""
    return annotation_label(_declared(expr, api))


_NOTHING = Result()

# Tensor methods whose result's dims follow from the receiver's and the positional
# arguments (name -> (receiver's dims, arguments) -> dims or None). A receiver mypy types
# as Any (``k`` of ``q, k, v = qkv``: iterating a tensor) gets no method hook, so its
# calls are read here.
DERIVED: dict[str, Callable[[Dims, list[Expression]], Dims | None]] = {}
# Functions torch's stubs leave untyped (``torch.linalg.solve`` is Any to mypy, so no hook
# sees its calls): full name -> (the arguments' dims, positional only) -> dims or None.
DERIVED_CALLS: dict[str, Callable[[list[Dims | None]], Dims | None]] = {}


def _value(function: FuncItem, expr: Expression, depth: int) -> Result:
    if depth > 8:
        return _NOTHING
    if isinstance(expr, NameExpr):
        binding = flow_of(function).binding(expr)
        return _bound(function, binding, depth) if binding is not None else _NOTHING
    produced = result_of(function, expr)  # a call, an operation, x.T
    if produced is not None:
        return produced
    if isinstance(expr, CallExpr) and isinstance(expr.callee, MemberExpr):
        derive = DERIVED.get(expr.callee.name)
        if derive is not None and all(kind == ARG_POS for kind in expr.arg_kinds):
            receiver = _value(function, expr.callee.expr, depth + 1).dims
            if receiver is not None:
                return Result(dims=derive(receiver, list(expr.args)))
    if isinstance(expr, CallExpr) and isinstance(expr.callee, RefExpr):
        call = DERIVED_CALLS.get(expr.callee.fullname)
        if call is not None and all(kind == ARG_POS for kind in expr.arg_kinds):
            return Result(dims=call([_value(function, a, depth + 1).dims for a in expr.args]))
    if isinstance(expr, MemberExpr):
        return Result(dims=_attribute(function, expr))
    return _NOTHING


def _bound(function: FuncItem, binding: Binding, depth: int) -> Result:
    signature = function.type
    if isinstance(binding, Parameter):
        kind = function.arguments[binding.index].kind
        if not isinstance(signature, CallableType) or binding.index >= len(signature.arg_types):
            return _NOTHING
        if kind not in (ARG_POS, ARG_OPT, ARG_NAMED, ARG_NAMED_OPT):
            return _NOTHING  # *args, **kwargs: a tuple or a dict of tensors
        return Result(dims=annotated_dims(signature.arg_types[binding.index]))
    assert isinstance(binding, Assigned)
    statement = binding.statement
    value = _value(function, statement.rvalue, depth + 1)
    if binding.item is not None:
        return Result(dims=value.item(binding.item))
    if value.dims is None and _annotates(statement):
        declared = annotated_dims(statement.type)
        if declared is not None:
            return Result(dims=without_free_names(declared, bound_names(function)))
    return value


def _annotates(statement: AssignmentStmt) -> bool:
    return (
        statement.type is not None
        and len(statement.lvalues) == 1
        and isinstance(statement.lvalues[0], NameExpr)
    )


def _attribute(function: FuncItem, expr: MemberExpr) -> Dims | None:
    """Dims the class annotates ``self.<name>`` with, in a method that never assigns it."""
    receiver = expr.expr
    if function.info is FUNC_NO_INFO or function.is_static or function.is_class:
        return None
    if not isinstance(receiver, NameExpr) or not function.arguments:
        return None
    if flow_of(function).binding(receiver) != Parameter(0):
        return None  # not self, or self rebound
    if expr.name in _assigned_attributes(function):
        return None
    for info in function.info.mro:
        declared = _annotated_attributes(info).get(expr.name)
        dims = annotated_dims(declared) if declared is not None else None
        if dims is not None:
            # A class may name its axes otherwise than the method does (n_features there,
            # features here): then only the names the method's own annotations use are
            # kept. An annotation that shares a name with the method's speaks its words.
            own = _own_names(function)
            if own & {name for dim in dims for name in _dim_names(dim)}:
                return dims
            return without_free_names(dims, own)
        if declared is not None:
            return None
        if expr.name in info.names:
            return None  # defined here without an annotation we can read
    return None


def _own_names(function: FuncItem) -> frozenset[str]:
    """The dim names a function's annotations use: its parameters' and its return's."""
    signature = function.type
    returned = signature.ret_type if isinstance(signature, CallableType) else None
    dims = annotated_dims(returned)
    named = {name for dim in dims or () for name in _dim_names(dim)}
    return bound_names(function) | named


def _dim_names(dim: object) -> tuple[str, ...]:
    if isinstance(dim, Axis):
        return dim.factors
    if isinstance(dim, Variadic) and dim.name:
        return (dim.name,)
    return ()


_ANNOTATED: dict[int, tuple[Block, dict[str, Type]]] = {}


def _annotated_attributes(info: TypeInfo) -> dict[str, Type]:
    """Attribute name -> the type an annotation in the class declares for it: in the
    class body (``w: Float[...]``) or on ``self.w: Float[...] = ...`` in a method."""
    body = info.defn.defs
    cached = _ANNOTATED.get(id(body))
    if cached is not None and cached[0] is body:
        return cached[1]
    found: dict[str, Type] = {}
    conflicting: set[str] = set()

    def declare(name: str, typ: Type | None) -> None:
        if typ is None:
            return
        if name in found and annotated_dims(found[name]) != annotated_dims(typ):
            conflicting.add(name)
        found.setdefault(name, typ)

    for statement in body.body:
        if isinstance(statement, AssignmentStmt) and _annotates(statement):
            lvalue = statement.lvalues[0]
            assert isinstance(lvalue, NameExpr)
            declare(lvalue.name, statement.type)
        method = statement.func if isinstance(statement, Decorator) else statement
        if not isinstance(method, FuncDef) or not method.arguments:
            continue
        this = method.arguments[0].variable.name
        for inner in iter_statements(method.body.body):
            if not isinstance(inner, AssignmentStmt) or inner.type is None:
                continue
            target = inner.lvalues[0] if len(inner.lvalues) == 1 else None
            if (
                isinstance(target, MemberExpr)
                and isinstance(target.expr, NameExpr)
                and target.expr.name == this
            ):
                declare(target.name, inner.type)
    for name in conflicting:
        del found[name]
    if len(_ANNOTATED) > _LIMIT:
        _ANNOTATED.clear()
    _ANNOTATED[id(body)] = (body, found)
    return found


_ASSIGNED: dict[int, tuple[Block, frozenset[str]]] = {}


def _assigned_attributes(function: FuncItem) -> frozenset[str]:
    """Attribute names the method assigns, augments or deletes on any object."""
    body = function.body
    cached = _ASSIGNED.get(id(body))
    if cached is not None and cached[0] is body:
        return cached[1]
    names: set[str] = set()
    for statement in iter_statements(body.body):
        targets: list[Expression] = []
        if isinstance(statement, AssignmentStmt):
            targets = list(statement.lvalues)
        elif isinstance(statement, OperatorAssignmentStmt):
            targets = [statement.lvalue]
        elif isinstance(statement, DelStmt):
            targets = [statement.expr]
        names.update(_member_names(targets))
    if len(_ASSIGNED) > _LIMIT:
        _ASSIGNED.clear()
    _ASSIGNED[id(body)] = (body, frozenset(names))
    return frozenset(names)


def _member_names(targets: list[Expression]) -> set[str]:
    names: set[str] = set()
    for target in targets:
        if isinstance(target, MemberExpr):
            names.add(target.name)
        for item in getattr(target, "items", ()):
            names |= _member_names([item])
    return names
