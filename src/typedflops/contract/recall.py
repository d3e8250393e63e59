"""Calls that read like an earlier one: what it bound, copied instead of found again.

The check of a tensor argument reads its class, dtype, device and shape, and the dims bound
before it; nothing else. So for a function whose checked parameters are tensors (or
Optional tensors) with annotations that read no argument values (no ``{name}`` dims), and
values of hints without tensors (``int``, ``str | None``, which bind nothing), a call whose
tensors read the same as those of an earlier call that passed, with the same module dims
bound before them, passes too and binds the same dims in the same places. Such a call
takes the earlier call's bindings (a dict copy) instead of walking every axis again. Any
other call (a new shape, a wrong dtype, a list where a tensor goes) is checked in full, so
every message is the one the full check gives. A tensor return value that reads as one
that passed against the same bindings is taken as passing too.

Only eager calls recall: under ``torch.compile`` dynamo traces the full checks.
"""

from __future__ import annotations

import inspect
import operator
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from ..errors import SpecError
from .annotation import is_torch_annotation
from .checkers import checks_plainly
from .deferred import spec_of
from .plain_hints import Predicate, plain_predicate
from .scope import CallState, bind_module_dims, module_dims

__all__ = [
    "Outcome",
    "RecallPlan",
    "check_arguments",
    "check_return",
    "recall_plan",
    "recall_span",
    "tensor_hint",
    "verdict",
]

#: What the check of a tensor reads of it: its class, dtype, device and shape. While a
#: function's calls are on the CPU, ``is_cpu`` stands for the device (no torch.device is
#: made or compared): all True, the tensors are on one device, the CPU.
DEVICE_FACTS = operator.attrgetter("__class__", "dtype", "device", "shape")
CPU_FACTS = operator.attrgetter("__class__", "dtype", "is_cpu", "shape")
Facts = Callable[[Any], tuple[Any, ...]]
_Tensor = torch.Tensor

#: Outcomes kept per function: past this many distinct calls they are forgotten.
LIMIT = 64

#: Per checked parameter: its position (or None), its keyword name (or None), and the
#: verdict of its hint on a value (None for a tensor, whose facts are read instead).
RecallPlan = tuple[tuple[int | None, str | None, Predicate | None], ...]


class CheckedParameter(Protocol):
    """A checked parameter as a plan reads it (``compiled.Parameter``)."""

    @property
    def name(self) -> str: ...
    @property
    def index(self) -> int | None: ...
    @property
    def kind(self) -> inspect._ParameterKind: ...
    @property
    def hint(self) -> Any: ...


class Contract(Protocol):
    """What recalling reads of a compiled contract (``compiled.Contract``) and keeps on it."""

    takes_self: bool
    recall_plan: RecallPlan | None
    recall_span: tuple[int, int] | None
    outcomes: dict[tuple[Any, ...], Outcome]
    last_outcome: tuple[tuple[Any, ...] | None, Outcome | None]
    read_facts: Facts
    recalls_return: bool
    return_verdict: Predicate | None

    def check_arguments(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], state: CallState
    ) -> None: ...
    def check_return(self, value: Any, state: CallState) -> None: ...


class Bindings(dict[str, Any]):
    """The dicts of an outcome (sizes, origins): shared by the calls that recall it, so
    never changed; a state that binds more takes copies first (``own_bindings``)."""

    __slots__ = ()


class Outcome:
    """What the arguments of a call that passed bound (a state that the calls recalling it
    share, never changed), and what its return value read."""

    __slots__ = ("facts", "returned", "state")

    def __init__(self, state: CallState, facts: Facts) -> None:
        shared = CallState(state.function, Bindings(state.sizes), Bindings(state.origins))
        shared.device, shared.device_where = state.device, state.device_where
        if state.broadcast_variadic:
            shared.broadcast_variadic = state.broadcast_variadic
        self.state = shared
        #: How the calls that recall it were read.
        self.facts = facts
        #: The facts of a tensor returned that passed binding nothing, once one has.
        self.returned: tuple[Any, ...] | None = None

    def own_state(self) -> CallState:
        """A state of the call's own with these bindings, for a call that sets more on it
        (its depth, dims its body binds)."""
        shared = self.state
        state = CallState(shared.function, shared.sizes, shared.origins)
        state.device, state.device_where = shared.device, shared.device_where
        if shared.broadcast_variadic:
            state.broadcast_variadic = shared.broadcast_variadic
        return state


def _unwrapped(hint: Any) -> Any:
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint


def tensor_hint(hint: Any) -> bool:
    """Whether the check of a value for ``hint`` reads only a tensor's facts (or that it is
    None): a tensor annotation without ``{name}`` dims, or an Optional of one."""
    hint = _unwrapped(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if len(options) != 2 or type(None) not in options:
            return False
        hint = _unwrapped(next(o for o in options if o is not type(None)))
    if not is_torch_annotation(hint):
        return False  # (other array types are checked by jaxtyping, which reads more)
    try:
        return "{" not in spec_of(hint).dim_str
    except SpecError:  # outside typedflops' grammar: checked by jaxtyping
        return False


def verdict(hint: Any) -> Predicate | None:
    """The verdict of a hint without tensor annotations on a value (it binds nothing), or
    None for a hint with tensors."""
    hint = _unwrapped(hint)
    return plain_predicate(hint) if checks_plainly(hint) else None


def recall_plan(checked: Sequence[CheckedParameter]) -> RecallPlan | None:
    """How calls are read to recall an outcome, from a contract's checked parameters (none
    of them ``*args``/``**kwargs``, no ``{name}`` dims), or None if they cannot be."""
    plan: list[tuple[int | None, str | None, Predicate | None]] = []
    for param in checked:
        keyword = None if param.kind is inspect.Parameter.POSITIONAL_ONLY else param.name
        if tensor_hint(param.hint):
            plan.append((param.index, keyword, None))
        elif (check := verdict(param.hint)) is not None:  # binds nothing: only a verdict
            plan.append((param.index, keyword, check))
        else:
            return None
    return tuple(plan)


def recall_span(plan: RecallPlan | None, positional: int) -> tuple[int, int] | None:
    """``(start, stop)`` when the plan reads tensors at positions ``start..stop-1`` and
    nothing else, and ``stop`` is the count of positional parameters: a call with ``stop``
    positional arguments is read in one pass over them."""
    if not plan or any(verdict is not None or index is None for index, _, verdict in plan):
        return None
    indices = [index for index, _, _ in plan]
    start = typing.cast(int, indices[0])
    if indices != list(range(start, start + len(indices))) or start + len(indices) != positional:
        return None
    return start, positional


def _read(
    plan: RecallPlan, facts: Facts, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[Any, ...] | None:
    """What the checks of a call's arguments read, or None if one needs the full check."""
    count = len(args)
    read: list[Any] = []
    for index, name, verdict in plan:
        if index is not None and index < count:
            value = args[index]
        elif name in kwargs:
            value = kwargs[name]  # type: ignore[index]  # (None is in no kwargs)
        else:
            read.append(None)
            continue
        if verdict is not None:
            if not verdict(value):
                return None
            read.append(True)
        elif value is None:  # (only an Optional takes None, and binds nothing then)
            read.append(None)
        elif isinstance(value, _Tensor):
            read.append(facts(value))
        else:
            return None
    return tuple(read)


def _check_in_full(
    contract: Contract, function: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> CallState:
    state = CallState(function)
    if contract.takes_self and args:
        bind_module_dims(args[0], state)
    contract.check_arguments(args, kwargs, state)
    return state


def check_arguments(
    contract: Contract, function: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[CallState, Outcome | None]:
    """Check a call's arguments (a module's own dims bound first) as the full check does,
    taking the outcome of an earlier call that read the same: the call's state, and the
    outcome recalled (None if none was; its state is then shared and never changed: a call
    that sets more on it takes ``outcome.own_state()``)."""
    plan = contract.recall_plan
    if plan is None:
        return _check_in_full(contract, function, args, kwargs), None
    facts = contract.read_facts
    span = contract.recall_span
    read: tuple[Any, ...] | None
    try:
        if span is not None and len(args) == span[1] and not contract.takes_self:
            read = tuple(map(facts, args[span[0] :] if span[0] else args))  # (the usual call)
        else:
            found = _read_call(contract, plan, facts, args, kwargs)
            if found is None:
                return _check_in_full(contract, function, args, kwargs), None
            read = found
        last_read, outcome = contract.last_outcome
        if last_read != read:
            outcome = contract.outcomes.get(read)
            if outcome is not None:
                contract.last_outcome = (read, outcome)
    except Exception:  # not a tensor, no shape, sizes without a hash: the full check says
        return _check_in_full(contract, function, args, kwargs), None
    if outcome is not None:
        return outcome.state, outcome
    state = _check_in_full(contract, function, args, kwargs)
    on_cpu = state.device is None or state.device.type == "cpu"
    if (facts is CPU_FACTS) != on_cpu:  # read again, as calls on this device are read
        facts = contract.read_facts = CPU_FACTS if on_cpu else DEVICE_FACTS
        read = _read_call(contract, plan, facts, args, kwargs)
    if read is not None:
        if len(contract.outcomes) >= LIMIT:
            contract.outcomes.clear()
        contract.outcomes[read] = outcome = Outcome(state, facts)
        contract.last_outcome = (read, outcome)
    return state, None


def _read_call(
    contract: Contract,
    plan: RecallPlan,
    facts: Facts,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> tuple[Any, ...] | None:
    """What the checks of a call read (a module's own dims included), or None if it needs
    the full check; raises if a value cannot be read (the full check then says why)."""
    span = contract.recall_span
    if span is not None and len(args) == span[1]:
        read = tuple(map(facts, args[span[0] :] if span[0] else args))
    else:
        found = _read(plan, facts, args, kwargs)
        if found is None:
            return None
        read = found
    if contract.takes_self and args:
        own = module_dims(args[0])
        if own:
            read += ((type(args[0]), tuple(own.items())),)
    return read


def check_return(
    contract: Contract, value: Any, state: CallState, outcome: Outcome | None
) -> CallState:
    """Check a call's return value as :meth:`Contract.check_return` does, taking it as
    passing when the arguments' outcome was recalled, the body bound nothing, and the
    value reads as one that passed against those bindings. The call's state after the
    check (its own, if the check bound more)."""
    if outcome is None or state.sizes is not outcome.state.sizes:
        contract.check_return(value, state)
        return state
    verdict = contract.return_verdict
    if verdict is not None:  # a hint without tensors: a verdict, no bindings
        if verdict(value):
            return state
    else:
        returned = outcome.returned
        if returned is not None:
            try:
                if outcome.facts(value) == returned:
                    return state
            except Exception:  # not a tensor, no shape: the full check says
                pass
    if state is outcome.state:
        state = outcome.own_state()
    state.own_bindings()
    contract.check_return(value, state)
    if (
        contract.recalls_return
        and state.sizes == outcome.state.sizes
        and isinstance(value, _Tensor)
    ):
        outcome.returned = outcome.facts(value)
    return state
