"""What ``record()`` keeps of the calls it sees: every decorated call counted as it ran, once
per distinct work.

A :class:`Call` is a decorated call being counted in one record: the ops it ran (each with
the user call it belongs to) and the calls it made, in order. When it returns, what it did
is looked up among the :class:`Work` the record has seen (the function, the dims it bound,
and each op's event and each inner call's work, in order): calls share a work, and so a
row, only when they did the same work; a call that did anything else is a work of its own.
So a repeated call costs its ops' dict lookups, and a recording keeps memory per distinct
work, not per call. Ops outside any decorated call, and the works of the record's top-level
calls, are folded into counts as they come (see :meth:`RecordSession.fold`).

Nothing keeps a user's tensor: events hold shapes, and a work keeps a weak reference to its
module (for dry runs that fit its formula; see :mod:`.recorder`).
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import torch

from ...contract.function import CheckedFunction, counting_frame, notify_observers
from ...contract.function import _observers as _observed
from ...contract.scope import CallState, call_scope
from ..types import Cost
from .counter import count_custom_backwards
from .dryrun import Probe
from .events import Event
from .fit import Size, size_value
from .frames import no_frame
from .probes import call_dims, call_probe, stub
from .recording import group_label, thread_mode
from .rules import declared_flops
from .session import declared_event
from .signature import signature_without_sizes

__all__ = [
    "Call",
    "RecordSession",
    "Work",
    "count_recorded_call",
    "count_recorded_coroutine",
    "note_measured",
]

_frame = counting_frame
_no_torch_function = torch._C.DisableTorchFunction
_thread = threading.get_ident
# As a checked call does (see typedflops.contract.function): past this depth of nested
# calls, the frames a recorded call adds (the checked call, the hook, this) are added to
# the recursion limit while it runs.
_SHALLOW = 8
_OWN_FRAMES = 4


class Work:
    """What one call did, once per record: its function, dims and items in order.

    ``items`` holds op groups (``(name, pattern, events)``: the ops of one user call) and
    the works of the calls it made. ``fixed`` is the cost of a benchmarked call (its
    ``measurement`` beside it), which stands in for its items.
    """

    __slots__ = (
        "__weakref__",
        "_cost",
        "_counts",
        "dims",
        "fitting",
        "fixed",
        "function",
        "items",
        "measurement",
        "probe",
    )

    def __init__(
        self,
        function: str,
        dims: dict[str, Size],
        items: tuple[Any, ...],
        probe: Callable[[], Probe] | None = None,
        fitting: Any = None,
    ) -> None:
        self.function = function
        self.dims = dims
        self.items = items
        self.probe = probe
        self.fitting = fitting
        self.fixed: Cost | None = None
        self.measurement: Any = None
        self._counts: Any = None
        self._cost: Cost | None = None

    def children(self) -> list[tuple[Work, int]]:
        """The works of the calls it made, each once, with how many times per call."""
        found: dict[Work, int] = {}
        for item in self.items:
            if type(item) is Work:
                found[item] = found.get(item, 0) + 1
        return list(found.items())

    def groups(self) -> list[tuple[str, str | None, tuple[Event, ...]]]:
        """Its own op groups, in order."""
        return [item for item in self.items if type(item) is tuple]


class Call:
    """A decorated call being counted in one record (or the record's root, ``parent`` None):
    ``items`` holds ``(event, label)`` pairs for its ops and the works of its calls."""

    __slots__ = ("declared", "function", "items", "parent", "session")

    def __init__(
        self,
        session: RecordSession,
        parent: Call | None,
        function: CheckedFunction[..., Any] | None,
        declared: bool = False,
    ) -> None:
        self.session = session
        self.parent = parent
        self.function = function
        self.items: list[Any] = []
        self.declared = declared

    def child(self, function: CheckedFunction[..., Any]) -> Call:
        """The call of ``function`` made inside this one (itself inside a ``flops=``
        call, whose declared count stands for everything its body runs)."""
        if self.declared:
            return self
        return Call(self.session, self, function, function.declared is not None)


class _Closed(list[Any]):
    """The items of a closed record's root: what still arrives is not its own."""

    def append(self, item: Any) -> None:
        pass


class RecordSession:
    """The calls and works of one ``record()`` block."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.root = Call(self, None, None)
        self.works: dict[Any, Work] = {}
        # The root's folded items: top-level works and loose op groups, with their counts.
        self.top: dict[Work, int] = {}
        self.loose: dict[tuple[str, str | None, tuple[Event, ...]], int] = {}
        self.zeroed: dict[Event, Event] = {}
        self.declared: dict[tuple[str, int], Event] = {}
        self.plain_dims: dict[CheckedFunction[..., Any], bool] = {}
        self.closed = False

    # -- a call returned ---------------------------------------------------------------

    def finish(
        self,
        call: Call,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        bound: Mapping[str, Size],
    ) -> None:
        """Close a call that returned: find (or make) its work, hand it to its caller."""
        fn = call.function
        assert fn is not None and call.parent is not None
        plain = self.plain_dims.get(fn)
        if plain is None:
            contract = fn.contract
            plain = self.plain_dims[fn] = not contract.takes_self and not any(
                p.spec.has_ellipsis for p in contract.tensor_parameters()
            )
        dims = bound if plain else call_dims(fn, args, kwargs, bound)
        flat = self._flat(call.items, call.declared)
        if call.declared:
            assert fn.declared is not None
            value = declared_flops(
                fn.name, fn.declared, {k: size_value(v) for k, v in dims.items()}
            )
            flat.append((fn.name, None))
            flat.append(self._declared(fn.name, value))
        key = (fn, tuple(dims.items()), tuple(flat))
        work = self.works.get(key)
        if work is None:
            work = self._new_work(fn, dict(dims), flat, args, kwargs, bound)
            self.works[key] = work
        parent = call.parent
        parent.items.append(work)
        if parent.parent is None and len(parent.items) > 4096:
            self.fold()

    def abandon(self, call: Call) -> None:
        """A call that raised: the ops it ran are its caller's."""
        assert call.parent is not None
        call.parent.items.extend(call.items)

    def _flat(self, items: list[Any], zero: bool) -> list[Any]:
        """A call's items as a flat key: a group's label, then its events; inner works."""
        flat: list[Any] = []
        previous: Any = flat  # no label is the list itself
        for item in items:
            if type(item) is tuple:
                event, label = item
                if label is None or label is not previous:
                    flat.append(group_label(label, event))
                    previous = label
                flat.append(self._zero(event) if zero else event)
            else:
                flat.append(item)
                previous = flat
        return flat

    def _zero(self, event: Event) -> Event:
        """The event with its forward FLOPs left to a ``flops=`` declaration."""
        found = self.zeroed.get(event)
        if found is None:
            found = object.__new__(Event)
            found.__dict__.update(event.__dict__)
            found.flops = 0
            found.origin = event
            self.zeroed[event] = found
        return found

    def _declared(self, function: str, value: int) -> Event:
        found = self.declared.get((function, value))
        if found is None:
            found = self.declared[(function, value)] = declared_event(function, value)
        return found

    def _new_work(
        self,
        fn: CheckedFunction[..., Any],
        dims: dict[str, Size],
        flat: list[Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        bound: Mapping[str, Size],
    ) -> Work:
        items = _grouped(flat)
        try:
            fitting: Any = (fn, signature_without_sizes(args, kwargs))
            hash(fitting)
        except TypeError:
            fitting = None
        probe = _probe_factory(fn, args, kwargs, dict(bound))
        return Work(fn.name, dims, items, probe, fitting)

    # -- the root ----------------------------------------------------------------------

    def fold(self, final: bool = False) -> None:
        """Fold the root's items into counts (all but the ops of a user call that may not
        have finished yet, unless ``final``)."""
        items = self.root.items
        if isinstance(items, _Closed):
            return
        keep = len(items)
        if not final and items and type(items[-1]) is tuple and items[-1][1] is not None:
            label = items[-1][1]
            while keep > 0 and type(items[keep - 1]) is tuple and items[keep - 1][1] is label:
                keep -= 1
        done, rest = items[:keep], items[keep:]
        for item in _grouped(self._flat(done, False)):
            if type(item) is Work:
                self.top[item] = self.top.get(item, 0) + 1
            else:
                self.loose[item] = self.loose.get(item, 0) + 1
        items[:] = rest

    def close(self) -> None:
        """The block ended: fold everything; later arrivals are not this record's."""
        self.fold(final=True)
        self.root.items = _Closed()
        self.closed = True

    def add_measured(self, name: str, cost: Cost, measurement: Any, call: Call) -> None:
        """A benchmarked call made inside ``call``: a work of its own, with its dry-run
        cost and its measurement."""
        work = Work(name, dict(cost.dims), ())
        work.fixed = cost
        work.measurement = measurement
        call.items.append(work)
        if call.parent is None:
            self.fold()


def _grouped(flat: list[Any]) -> tuple[Any, ...]:
    """A flat key back as items: ``(name, pattern, events)`` groups and works."""
    items: list[Any] = []
    label: tuple[str, str | None] | None = None
    events: list[Event] = []
    for entry in flat:
        if type(entry) is tuple:
            if label is not None:
                items.append((label[0], label[1], tuple(events)))
            label, events = entry, []
        elif type(entry) is Work:
            if label is not None:
                items.append((label[0], label[1], tuple(events)))
            label, events = None, []
            items.append(entry)
        else:
            events.append(entry)
    if label is not None:
        items.append((label[0], label[1], tuple(events)))
    return tuple(items)


def _probe_factory(
    fn: CheckedFunction[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    bound: Mapping[str, Size],
) -> Callable[[], Probe]:
    """Build the work's probe now (it keeps shapes, not tensors) and hand it out later."""
    module = args[0] if args and isinstance(args[0], torch.nn.Module) else None
    reference = weakref.ref(module) if module is not None else None
    rest = args[1:] if module is not None else args
    shapes = tuple(stub(a) for a in rest)
    named = {k: stub(v) for k, v in kwargs.items()}

    def make() -> Probe:
        owner = reference() if reference is not None else None
        if reference is not None and owner is None:
            raise RuntimeError(f"{fn.name}: its module no longer exists")
        positional = (owner, *shapes) if reference is not None else shapes
        return call_probe(fn, positional, named, bound)

    return make


# -- the contract's hook, for records ----------------------------------------------------


def count_recorded_call(
    calls: tuple[Call, ...],
    function: CheckedFunction[Any, Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Any:
    """Check, run and count one call in every record open here (``calls``: the innermost
    call of each). typedflops' own work (checks, bookkeeping) runs with torch-function
    modes off, so that only the body's ops are seen."""
    if calls[0].session.thread != _thread():
        # another thread, given this context (asyncio.to_thread copies it): its ops are
        # not this record's, nor its calls
        calls = tuple(call for call in calls if call.session.thread == _thread())
        if not calls:
            with no_frame():
                return function(*args, **kwargs)
    with _no_torch_function():
        state = function.check_arguments(args, kwargs)
    if function.deferred:
        return function.call_deferred(args, kwargs, state)
    if len(calls) == 1:
        inner: tuple[Call, ...] = (calls[0].child(function),)
    else:
        inner = tuple(call.child(function) for call in calls)
    frame_token = _frame.set(inner)
    scope_token = call_scope.set(state)
    parent = scope_token.old_value
    deep = False
    if isinstance(parent, CallState):
        state.depth = parent.depth + 1
        if state.depth > _SHALLOW:
            # recursion: the frames a recorded call adds do not count against it
            deep = True
            sys.setrecursionlimit(sys.getrecursionlimit() + _OWN_FRAMES)
    try:
        result = count_custom_backwards(function.body(*args, **kwargs), thread_mode())
    except BaseException:
        _abandon(inner, calls)
        raise
    finally:
        call_scope.reset(scope_token)
        _frame.reset(frame_token)
        if deep:
            sys.setrecursionlimit(sys.getrecursionlimit() - _OWN_FRAMES)
    with _no_torch_function():
        try:
            function.check_return(result, state)
        except BaseException:
            _abandon(inner, calls)
            raise
        sizes = state.sizes
        for index, call in enumerate(inner):
            if call is not calls[index]:  # (else inside a flops= call: part of its body)
                call.session.finish(call, args, kwargs, sizes)
    if _observed:
        notify_observers(function, args, kwargs, state)
    return result


def _abandon(inner: tuple[Call, ...], calls: tuple[Call, ...]) -> None:
    for call, outer in zip(inner, calls, strict=True):
        if call is not outer:
            call.session.abandon(call)


async def count_recorded_coroutine(
    calls: tuple[Call, ...],
    function: CheckedFunction[Any, Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    state: CallState,
    coroutine: Coroutine[Any, Any, Any],
) -> Any:
    """Await a decorated coroutine's body as one counted call of every record open here."""
    inner = tuple(call.child(function) for call in calls)
    token = _frame.set(inner)
    try:
        result = await coroutine
    except BaseException:
        _abandon(inner, calls)
        raise
    finally:
        _frame.reset(token)
    for call, outer in zip(inner, calls, strict=True):
        if call is not outer:
            call.session.finish(call, args, kwargs, state.sizes)
    return result


def note_measured(name: str, cost: Cost, measurement: Any) -> None:
    """A benchmarked call: a row in every record open here, with its measurement."""
    calls = _frame.get()
    if type(calls) is tuple:
        for call in calls:
            call.session.add_measured(name, cost, measurement, call)
