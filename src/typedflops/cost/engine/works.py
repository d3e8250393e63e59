"""What ``record()`` keeps of the calls it sees: every decorated call counted as it ran, once
per distinct work.

A :class:`Call` is a decorated call being counted in one record: the ops it ran, each
after a marker of the user call it ran in (see :mod:`.recording`), and the works of the
calls it made, in order. When it returns, what it did is looked up among the :class:`Work`
the record has seen (the function, the dims it bound, and its items in order): calls share
a work, and so a row, only when they did the same work; a call that did anything else is a
work of its own. So a repeated call costs its ops' dict lookups, and a recording keeps
memory per distinct work, not per call. Ops outside any decorated call, and the works of
the record's top-level calls, are folded into counts as they come (see
:meth:`RecordSession.fold`).

Nothing keeps a user's tensor: events hold shapes, and a work keeps a weak reference to its
module (for dry runs that fit its formula; see :mod:`.recorder`).
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ...contract.function import CheckedFunction
from ..types import Cost
from .backward_ran import BackwardRan
from .dryrun import Probe
from .events import Event, _group
from .fit import Size, size_value
from .live_records import calls_here, forget_full
from .probes import WorkProbe, call_dims
from .ragged import whole_sizes, without_ragged
from .recording import ROOT_LIMIT, START, RecordingMode
from .rules import declared_flops
from .session import declared_event
from .signature import signature_without_sizes
from .sites import Site, sites_of
from .waits import scope as _calls_scope

__all__ = ["Call", "RecordSession", "Work", "open_caller"]


class Work:
    """What one call did, once per record: its function, dims and items in order.

    ``items`` holds op groups (``(name, pattern, events)``: the ops of one user call) and
    the works of the calls it made, grouped from the call's ``flat`` items when first read
    (see :mod:`.recording`). ``fixed`` is the cost of a benchmarked call (its
    ``measurement`` beside it), which stands in for its items.
    """

    __slots__ = (
        "__weakref__",
        "_cost",
        "_counts",
        "_items",
        "dims",
        "fitting",
        "fixed",
        "flat",
        "function",
        "measurement",
        "probe",
    )

    def __init__(
        self,
        function: str,
        dims: dict[str, Size],
        flat: tuple[Any, ...],
        probe: Callable[[], Probe] | None = None,
        fitting: Any = None,
    ) -> None:
        self.function = function
        self.dims = dims
        self.flat = flat
        self._items: tuple[Any, ...] | None = None
        self.probe = probe
        self.fitting = fitting
        self.fixed: Cost | None = None
        self.measurement: Any = None
        self._counts: Any = None
        self._cost: Cost | None = None

    @property
    def items(self) -> tuple[Any, ...]:
        """Its op groups and the works of its calls, in order."""
        if self._items is None:
            self._items = _grouped(self.flat)
        return self._items

    def children(self) -> list[tuple[Work, int]]:
        """The works of the calls it made, each once, with how many times per call."""
        found: dict[Work, int] = {}
        for item in self.flat:
            if type(item) is Work:
                found[item] = found.get(item, 0) + 1
        return list(found.items())

    def groups(self) -> list[tuple[str, str | None, tuple[Event, ...]]]:
        """Its own op groups, in order."""
        return [item for item in self.items if type(item) is tuple]


class _Body:
    """What a record reads of a decorated function once: the body it runs, its code (whose
    frames name its ops, see :mod:`.sites`), whether it declares ``flops=``, runs later (a
    coroutine or generator) or binds dims itself, and whether its dims are the ones its
    annotations bind."""

    __slots__ = (
        "binds",
        "code",
        "declared",
        "deferred",
        "last",
        "plain",
        "run",
        "simple",
        "sites",
    )

    def __init__(self, function: CheckedFunction[..., Any]) -> None:
        self.run = function.body
        code = getattr(function.__wrapped__, "__code__", None)
        self.code: types.CodeType | None = code if isinstance(code, types.CodeType) else None
        self.sites = sites_of(self.code)
        self.declared = function.declared is not None
        self.deferred = function.deferred
        #: Whether its calls return at once and count what they run (no ``flops=``).
        self.simple = not self.declared and not self.deferred
        self.binds = function.binds_in_body
        contract = function.contract
        self.plain = not contract.takes_self and not any(
            p.spec.has_ellipsis for p in contract.tensor_parameters()
        )
        #: Its last call's dims, items and work (in the record that reads it).
        self.last: tuple[Mapping[str, Size], list[Any], Work] | None = None


class Call:
    """A decorated call being counted in one record (or the record's root, ``parent`` None):
    ``items`` holds its ops' events after markers, and the works of its calls (see
    :mod:`.recording`); ``label`` is the user call its last op ran in."""

    __slots__ = (
        "body",
        "code",
        "declared",
        "done",
        "function",
        "items",
        "label",
        "parent",
        "session",
        "sites",
    )

    def __init__(
        self,
        session: RecordSession,
        parent: Call | None,
        function: CheckedFunction[..., Any] | None,
        body: _Body | None = None,
    ) -> None:
        self.session = session
        self.parent = parent
        self.function = function
        self.items: list[Any] = []
        self.label: Any = START
        self.body = body
        #: Whether it returned or raised (a context copied inside it may run later).
        self.done = False
        if parent is not None and parent.parent is None:
            # (a top-level call: its leaves' gradients are its own, see .waits.new_call)
            _calls_scope.serial += 1
        if body is None:
            self.declared = False
            self.code: types.CodeType | None = None
            self.sites: dict[int, Site] | None = None
        else:
            self.declared = body.declared
            self.code, self.sites = body.code, body.sites

    def child(self, function: CheckedFunction[..., Any], body: _Body) -> Call:
        """The call of ``function`` made inside this one (itself inside a ``flops=``
        call, whose declared count stands for everything its body runs)."""
        if self.declared:
            return self
        return Call(self.session, self, function, body)

    def add(self, item: Any) -> None:
        """Add a work (a call it made) or a marker-led run of items."""
        self.items.append(item)
        self.label = START
        if self.parent is None and len(self.items) > ROOT_LIMIT:
            self.session.fold()


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
        # The root's ops, past a fold, whose edges still wait (whether they reach backward
        # is decided later, in place here): folded when the record closes.
        self.held: list[Any] = []
        self.zeroed: dict[Event, Event] = {}
        self.declared: dict[tuple[str, int], Event] = {}
        self.bodies: dict[CheckedFunction[..., Any], _Body] = {}
        #: The calls of decorated generators that have not ended, in the order of their
        #: first step here, each with its generator's call (see :mod:`.generator_calls`).
        self.generators: dict[Call, Any] = {}
        self.closed = False
        #: What autograd's engine ran inside the record (see :mod:`.backward_ran`).
        self.backward_ran = BackwardRan()
        #: The recording mode of its thread (set when the record opens).
        self.mode: RecordingMode | None = None
        #: The frame of the code inside the ``with record()`` block while it is open: a
        #: tensor let go unread in a module's forward it called (``out, _ = self.rnn(x)``)
        #: is no loss a backward starts from, one it or a function it called lets go may be.
        #: Kept as its id and code (a frame held would keep its locals alive after it
        #: returns, where a record is closed elsewhere).
        self.block: tuple[int, types.CodeType] | None = None
        #: The asyncio task that opened it (None outside any), and its place in the order
        #: records opened (see :mod:`.live_records`).
        self.owner: Any = None
        self.serial = 0
        self.registry: Any = None

    def body(self, function: CheckedFunction[..., Any]) -> _Body:
        """What this record reads of ``function`` (read on its first call)."""
        found = self.bodies.get(function)
        if found is None:
            found = self.bodies[function] = _Body(function)
        return found

    # -- a call returned ---------------------------------------------------------------

    def finish(
        self,
        call: Call,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        bound: Mapping[str, Size],
        forget: bool = True,
        fit: bool = True,
    ) -> None:
        """Close a call that returned: find (or make) its work, hand it to its caller
        (``forget``: the thread's ``full`` tuple no longer taken as it is, see
        :func:`.live_records.forget_full`; its caller may set it itself; ``fit``: whether
        a dry run may fit its formula, not for a generator's)."""
        fn, body, parent = call.function, call.body, call.parent
        assert fn is not None and body is not None and parent is not None
        dims = bound if body.plain else call_dims(fn, args, kwargs, bound)
        items = call.items
        if call.declared:
            if not whole_sizes(dims):
                dims = without_ragged(dims)
            items = self._declared(fn, items, dims)
        last = body.last
        if last is not None and last[0] is dims and last[1] == items:
            # (the usual: a call that did what the last one did, its sizes read before)
            work = last[2]
        else:
            if not whole_sizes(dims):
                dims = without_ragged(dims)  # (see .ragged: kept as read, never ragged)
            flat = tuple(items)
            key = (fn, tuple(dims.items()), flat)
            found = self.works.get(key)
            if found is None:
                found = self.works[key] = (
                    self._new_work(fn, dict(dims), flat, args, kwargs, bound)
                    if fit
                    else Work(fn.name, dict(dims), flat)
                )
            work = found
            body.last = (dims, items, work)
        if parent.parent is not None:
            parent.items.append(work)
        elif not self.closed:  # (a top-level call: counted at once, as a fold would)
            top = self.top
            top[work] = top.get(work, 0) + 1
        parent.label = START
        call.done = True
        if forget:
            forget_full()

    def work_so_far(
        self,
        call: Call,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        bound: Mapping[str, Size],
    ) -> Work:
        """What ``call``, which has not returned, ran until now, as a work of its own (not
        kept: read while the record is open)."""
        fn, body = call.function, call.body
        assert fn is not None and body is not None
        dims = bound if body.plain else call_dims(fn, args, kwargs, bound)
        if not whole_sizes(dims):
            dims = without_ragged(dims)
        items = self._declared(fn, call.items, dims) if call.declared else call.items
        return Work(fn.name, dict(dims), tuple(items))

    def abandon(self, call: Call) -> None:
        """A call that raised: the ops it ran are its caller's."""
        assert call.parent is not None
        call.parent.items.extend(call.items)
        call.parent.label = START
        call.done = True
        forget_full()

    def _declared(
        self, fn: CheckedFunction[..., Any], items: list[Any], dims: Mapping[str, Size]
    ) -> list[Any]:
        """A ``flops=`` call's items: its events with their forward FLOPs left to the
        declaration, then the declared count."""
        assert fn.declared is not None
        value = declared_flops(fn.name, fn.declared, {k: size_value(v) for k, v in dims.items()})
        declared = self.declared.get((fn.name, value))
        if declared is None:
            declared = self.declared[(fn.name, value)] = declared_event(fn.name, value)
        zeroed = [self._zero(item) if type(item) is Event else item for item in items]
        return [*zeroed, (fn.name, None), declared]

    def _zero(self, event: Event) -> Event:
        """The event with its forward FLOPs left to a ``flops=`` declaration."""
        found = self.zeroed.get(event)
        if found is None:
            found = object.__new__(Event)
            found.__dict__.update(event.__dict__)
            found.flops = found.matmul_flops = 0
            found.origin = event
            self.zeroed[event] = found
        return found

    def _new_work(
        self,
        fn: CheckedFunction[..., Any],
        dims: dict[str, Size],
        flat: tuple[Any, ...],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        bound: Mapping[str, Size],
    ) -> Work:
        grad = torch.is_grad_enabled()
        probe = WorkProbe(fn, args, kwargs, bound, grad)
        try:
            # (fits are shared by calls made alike: arguments, grad mode, torch's settings
            # and what the body reads)
            fitting: Any = (
                fn,
                signature_without_sizes(args, kwargs),
                grad,
                probe.torch,
                probe.read,
            )
            hash(fitting)
        except TypeError:
            fitting = None
        return Work(fn.name, dims, flat, probe, fitting)

    # -- the root ----------------------------------------------------------------------

    def fold(self, final: bool = False) -> None:
        """Fold the root's items into counts (all but the ops of a user call that may not
        have finished yet, unless ``final``)."""
        items = self.root.items
        if isinstance(items, _Closed):
            return
        keep = len(items)
        if not final:
            while keep > 0 and type(items[keep - 1]) is Event:
                keep -= 1
            if keep == 0 or items[keep - 1] is None or type(items[keep - 1]) is Work:
                keep = len(items)  # ops named each by itself, or a call's work: all done
            else:
                keep -= 1  # from the marker of the last user call's ops
        sums = self.mode.sums if self.mode is not None else None
        waiting = sums.places_in(items) if sums is not None and keep else []
        done = self._hold(items, keep, waiting) if waiting else items[:keep]
        if final and self.held:
            done, self.held = [*self.held, *done], []
        for item in _grouped(done):
            if type(item) is Work:
                self.top[item] = self.top.get(item, 0) + 1
            else:
                self.loose[item] = self.loose.get(item, 0) + 1
        items[:] = items[keep:]

    def _hold(self, items: list[Any], keep: int, waiting: list[tuple[int, Any, int]]) -> list[Any]:
        """The first ``keep`` root items to fold now: the op groups holding an op whose
        edges still wait go to ``held`` instead (an op found later to reach no backward
        is taken off backward where it is kept), and the places of those past ``keep``
        move with them."""
        first: dict[int, int] = {}  # the start of each waiting event's group
        start, label = 0, None
        waits = {index for index, _, _ in waiting}
        for index in range(keep):
            entry = items[index]
            if type(entry) is not Event:
                start, label = index, (None if type(entry) is Work else entry)
            elif index in waits:
                first[index] = start if label is not None else index
        moved: dict[int, int] = {}
        spans = sorted(set(first.values()))
        taken: set[int] = set()
        for begin in spans:
            if type(items[begin]) is Event:
                self.held.append(None)  # (an op named by itself)
                moved[begin] = len(self.held)
                self.held.append(items[begin])
                taken.add(begin)
                continue
            end = begin + 1
            while end < keep and type(items[end]) is Event:
                end += 1
            for index in range(begin, end):
                moved[index] = len(self.held)
                self.held.append(items[index])
                taken.add(index)
        for index, places, position in waiting:
            where = moved.get(index)
            if where is not None:
                places[position] = (self.held, where)
            elif index >= keep:
                places[position] = (items, index - keep)
        return [item for index, item in enumerate(items[:keep]) if index not in taken]

    def loose_groups(self) -> dict[tuple[str, str | None, tuple[Event, ...]], int]:
        """The op groups run outside any decorated call, with their counts (the held ones
        as they stand; read in the record's thread between torch calls, the last call's
        too, which a fold leaves out while it may not have ended). Read inside decorated
        calls that have not returned, their ops so far count as ops of the record's own,
        as they would if the block ended there (see :meth:`close`)."""
        pending = self.held
        if not self.closed and threading.get_ident() == self.thread:
            inside = self.open_items()
            if _group.get() is None and self.root.items:
                pending = [*self.held, *self.root.items, *inside]
            elif inside:
                pending = [*self.held, *inside]
        if not pending:
            return self.loose
        found = dict(self.loose)
        for group in _grouped(pending):
            if type(group) is tuple:
                found[group] = found.get(group, 0) + 1
        return found

    def open_items(self) -> list[Any]:
        """The items of this record's decorated calls that have not returned, in this
        thread (outermost first), read as they stand: nothing is moved."""
        calls = calls_here()
        if type(calls) is not tuple:
            return []
        for call in calls:
            if call.session is self:
                break
        else:
            return []
        chain: list[Call] = []
        while call.parent is not None:
            chain.append(call)
            call = call.parent
        return [item for inside in reversed(chain) for item in inside.items]

    def open_works(self) -> dict[Work, int]:
        """The works of calls that returned inside this record's calls that have not (read
        in the record's thread), with their counts: rows of the record's own until then."""
        if self.closed or threading.get_ident() != self.thread:
            return {}
        found: dict[Work, int] = {}
        for item in self.open_items():
            if type(item) is Work:
                found[item] = found.get(item, 0) + 1
        if self.generators:
            # (generators that have not ended: what their steps ran so far, each a row,
            # but the ones whose step is running here, read above as the caller's)
            running = self._running()
            for call, generator in list(self.generators.items()):  # (a collection may end one)
                if call not in running:
                    work = generator.so_far(call)
                    found[work] = found.get(work, 0) + 1
        return found

    def _running(self) -> set[Call]:
        """The calls of this record open where this is read (the innermost and its
        callers)."""
        calls = calls_here()
        found: set[Call] = set()
        if type(calls) is tuple:
            for call in calls:
                if call.session is self:
                    while call is not None:
                        found.add(call)
                        call = call.parent
        return found

    def close(self, frame: Any = None) -> None:
        """The block ended: fold everything; later arrivals are not this record's. A block
        that ends inside decorated calls (``frame``: the calls open where it ended) keeps
        what they ran so far as ops of its own; a generator that has not ended is a row
        with what its steps ran (see :mod:`.generator_calls`)."""
        pending, self.generators = list(self.generators.items()), {}
        top: list[tuple[Call, Any]] = []
        for call, generator in reversed(pending):  # (one inside another first)
            caller = open_caller(call)
            if caller.parent is None:
                top.append((call, generator))
            else:
                generator.end_in(call, caller)
        for call, generator in reversed(top):  # (in the order of their first step)
            generator.end_in(call, self.root)
        if type(frame) is tuple:
            for call in frame:
                if call.session is self and call.parent is not None:
                    self._unwind(call)
        self.fold(final=True)
        self.root.items = _Closed()
        self.closed = True

    def _unwind(self, call: Call) -> None:
        """Move the items of ``call`` and of the calls it is inside (none has returned) to
        the root, in the order they ran."""
        chain: list[Call] = []
        while call.parent is not None:
            chain.append(call)
            call = call.parent
        for inside in reversed(chain):
            if inside.done:
                continue  # (a generator's call: a row already, see close)
            call.items.extend(inside.items)
            inside.items = []
            inside.label = START
        call.label = START

    def add_measured(self, name: str, cost: Cost, measurement: Any, call: Call) -> None:
        """A benchmarked call made inside ``call``: a work of its own, with its dry-run
        cost and its measurement."""
        work = Work(name, dict(cost.dims), ())
        work.fixed = cost
        work.measurement = measurement
        call.add(work)


def open_caller(call: Call) -> Call:
    """The first of ``call``'s callers that has not returned (its record's root at last)."""
    parent = call.parent
    assert parent is not None
    while parent.done and parent.parent is not None:
        parent = parent.parent
    return parent


def _grouped(flat: Sequence[Any]) -> tuple[Any, ...]:
    """A call's items as ``(name, pattern, events)`` groups and works: the events after a
    marker form one group (after None, each event is one, named after its op)."""
    items: list[Any] = []
    label: tuple[str | None, str | None] | None = None
    events: list[Event] = []
    for entry in flat:
        kind = type(entry)
        if kind is Event:
            if label is None:
                items.append((entry.op, None, (entry,)))
            else:
                events.append(entry)
            continue
        if label is not None and events:
            items.append((label[0] or events[0].op, label[1], tuple(events)))
        label, events = None, []
        if kind is Work:
            items.append(entry)
        elif kind is Site:
            label = (entry.name, None)  # (a site whose call has no name: its first op's)
        elif entry is not None:
            label = entry
    if label is not None and events:
        items.append((label[0] or events[0].op, label[1], tuple(events)))
    return tuple(items)
