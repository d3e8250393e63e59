"""Where a record puts what an op adds: each op's event in the calls of the records open
here, after a marker where it begins another user call (see :mod:`.recording`), and the
hooks by which an edge's gradient sum, decided later, lands in the call its op ran in.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import torch

from .events import Event, Group
from .events import _group as _current_group
from .live_records import calls_here as _calls
from .sites import Site, find_site
from .waits import Place

__all__ = [
    "OWN_ROW",
    "ROOT_LIMIT",
    "START",
    "Sink",
    "add_event",
    "in_torch_call",
    "in_user_call",
    "is_marker",
    "let_go_elsewhere",
    "place",
    "place_in",
    "places",
    "realm",
    "where",
]

_Group = Group

#: A record's root keeps at most this many pending items before it folds them into counts.
ROOT_LIMIT = 4096

#: A call's last label before its first op and after each call it made: its next op
#: starts a user call (a marker goes first).
START = object()


def place(calls: tuple[Any, ...], event: Event) -> None:
    """Add an event to each call: after a marker where it starts another user call."""
    group = _current_group.get()
    for call in calls:
        if group is not None:
            label: Any = group
        elif call.sites is not None:
            label = find_site(call.code, call.sites)
        else:
            label = None
        _append(call, label, event)


def _append(call: Any, label: Any, event: Event) -> None:
    items = call.items
    if label is not call.label:
        call.label = label
        items.append((label.name, label.pattern) if type(label) is _Group else label)
    items.append(event)
    if call.parent is None and len(items) > ROOT_LIMIT:
        call.session.fold()


def where() -> Any:
    """Where an op just placed ran: the records' calls open here, each with the op's
    label, so that what its edges add later falls in the same row."""
    calls = _calls()
    if type(calls) is not tuple:
        return None
    return calls, tuple(call.label for call in calls)


def realm(context: Any) -> Any:
    """The outermost record of a context (its session), by which edges are counted."""
    return id(context[0][0].session) if context is not None and context[0] else None


def in_user_call() -> bool:
    """Whether a user call runs in this thread or task (a record's own code does not)."""
    calls = _calls()
    return type(calls) is tuple and bool(calls) and calls[0].parent is not None


def let_go_elsewhere() -> bool:
    """Whether a tensor let go now is let go inside a module's forward that the code of a
    record block open here called (``out, _ = self.rnn(x)``): a local no backward starts
    from, as in an estimate of the module. A plain function the block called is its own
    code (``train_step()`` computing a loss)."""
    calls = _calls()
    if type(calls) is not tuple:
        return False
    try:
        frame: FrameType | None = sys._getframe(2)  # (past this and the weak reference's callback)
    except ValueError:  # (a thread of autograd's engine: no Python frame)
        return False
    while frame is not None:
        if frame.f_code is _CALL_IMPL:
            return True
        if any(call.session.block == (id(frame), frame.f_code) for call in calls):
            return False
        frame = frame.f_back
    return False


_CALL_IMPL = torch.nn.Module._call_impl.__code__


def in_torch_call() -> bool:
    """Whether one torch call of a record's own code runs on plain tensors (its temporaries
    are its own; a nested tensor's call returns what the sums do not follow)."""
    group = _current_group.get()
    return group is not None and group.plain


def place_in(context: Any, event: Event) -> None:
    """Hand an event to the records of a context taken earlier (see :func:`where`): in
    the call where the op it comes from ran, as an op group of its own where that op's
    was one (a gradient sum is listed as ``gradient sum``, as an estimate lists it, not
    as part of the op that made the extra edge)."""
    if context is not None:
        own = event.group
        for call, label in zip(*context, strict=True):
            _append(call, own if type(label) is _Group and type(own) is _Group else label, event)


def add_event(event: Event) -> None:
    """Hand an event (a whole call counted by a rule, one without a rule) to the records
    open in this thread or task."""
    calls = _calls()
    if type(calls) is tuple:
        place(calls, event)


class Sink:
    """Where the counting mode's own path (and watched Python functions) puts events."""

    def add(self, event: Event) -> None:
        add_event(event)


class _OwnRowSink:
    """Where a ``torch.autograd.Function``'s backward goes: a row of its own, named after
    the Function (as an estimate lists it), not the row of the op that took its output. It
    goes before that op's call where the op is the call's first (so the call stays one
    row), else after it. A backward that runs no op (a module's backward hooks hand the
    gradients on) stays with the op that took the output: it adds nothing."""

    def add(self, event: Event) -> None:
        if event.counted and not event.backward and not event.rerun:
            add_event(event)
            return
        calls = _calls()
        if type(calls) is tuple:
            for call in calls:
                items = call.items
                if len(items) >= 2 and type(items[-1]) is Event and is_marker(items[-2]):
                    items[-2:-2] = [None, event]
                else:
                    _append(call, None, event)


def is_marker(item: Any) -> bool:
    """Whether an item of a call begins a user call's ops (see the module)."""
    return item is None or type(item) is tuple or type(item) is Site


OWN_ROW = _OwnRowSink()


def places(event: Event) -> list[Place]:
    """Where the records open here keep ``event``, just placed: each call's items."""
    calls = _calls()
    found: list[Place] = []
    if type(calls) is tuple:
        for call in calls:
            items = call.items
            if items and items[-1] is event:
                found.append((items, len(items) - 1))
    return found
