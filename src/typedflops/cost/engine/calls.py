"""A decorated call while a session counts: which frame its ops go to, or, for a call whose
cost is already known (a ``record()`` row seen before, a block repeated in a dry run), run
with counting out of the way and its known events or counts reused."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from ...contract.function import CheckedFunction
from .counter import suspended
from .events import Event, Group, new_serial
from .fit import Size, size_value
from .frames import Frame, in_frame, owned_by
from .kernels import TargetKernels
from .probes import call_dims
from .recorder import RecordSession, Row
from .rules import declared_flops
from .session import RunSession, Session, declared_event
from .shortcut import Shortcut, shortcut_of, stand_in
from .signature import structural_signature

__all__ = ["CallHandle", "begin_call", "counted_call"]


class CallHandle:
    """One decorated call while a session counts.

    ``kind`` is ``"count"`` (its ops go to ``frame``), ``"inline"`` (part of a declared
    call's body: its ops go to the enclosing frame), ``"cached"`` (a ``record()`` row seen
    before) or ``"replay"`` (a block repeated in a dry run: its first call's events are
    copied); the last two run the body with counting out of the way, and a replay whose
    first call returned a fresh tensor does not run it (see :mod:`.shortcut`).
    """

    __slots__ = (
        "args",
        "fn",
        "frame",
        "kind",
        "kwargs",
        "mark",
        "replay",
        "row",
        "session",
        "start",
    )

    def __init__(
        self,
        session: Session,
        frame: Frame | None,
        fn: CheckedFunction[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        row: Row | None,
        kind: str,
    ) -> None:
        self.session = session
        self.frame = frame
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.row = row
        self.kind = kind
        self.start = 0
        self.mark = 0
        self.replay: tuple[Any, Frame, list[Event], Shortcut | None] | None = None

    @property
    def shortcut(self) -> Shortcut | None:
        """How to stand in for the body: set for a repeat of a block whose first call
        returned a fresh tensor (see :mod:`.shortcut`); None when the body must run."""
        if self.kind != "replay" or self.replay is None:
            return None
        return self.replay[3]

    def stand_in(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The result of a repeated block without running its body (inside :meth:`scope`)."""
        shortcut = self.shortcut
        assert shortcut is not None and isinstance(self.session, RunSession)
        assert self.session.saved is not None
        return stand_in(shortcut, self.frame, args, kwargs, self.session.saved)

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """The context the body runs in: its frame, or counting out of the way. In a dry
        run the call also owns what autograd saves while it runs (repeated or not)."""
        dry_run = isinstance(self.session, RunSession)
        if self.kind not in ("cached", "replay") and not dry_run:
            return in_frame(self.frame)
        stack = contextlib.ExitStack()
        if dry_run:
            stack.enter_context(owned_by(self.frame))
        if self.kind in ("cached", "replay"):
            stack.enter_context(suspended(self.session.mode))
            stack.enter_context(in_frame(None))
            target = self.session.target if isinstance(self.session, RunSession) else None
            if target is not None:
                stack.enter_context(TargetKernels(target))
        else:
            stack.enter_context(in_frame(self.frame))
        return stack

    def finish(self, bound: Mapping[str, Size], result: Any = None) -> None:
        """Close the call after its body returned ``result`` and it passed the checks."""
        session = self.session
        if isinstance(session, RecordSession):
            session.finish(self.kind, self.row, self.frame, self.fn, self.args, self.kwargs, bound)
            return
        assert isinstance(session, RunSession) and self.frame is not None
        if self.kind == "replay":
            assert self.replay is not None
            _, first, events, _ = self.replay
            session.events.extend(_moved(events, first, self.frame))
            return
        sizes = dict(bound)
        declared = self.fn.declared
        parent = self.frame.parent
        if self.kind == "count" and declared is not None:
            dims = call_dims(self.fn, self.args, self.kwargs, sizes)
            values = {k: size_value(v) for k, v in dims.items()}
            value = declared_flops(self.fn.name, declared, values)
            session.events.append(declared_event(self.fn.name, value, self.frame))
        if self.kind == "count" and self.replay is not None:
            key = self.replay[0]
            shortcut = None
            if session.saved is not None:
                shortcut = shortcut_of(result, self.args, self.kwargs, session.saved, self.mark)
            session.blocks[key] = (self.frame, session.events[self.start :], shortcut)
        if self.kind == "count" and parent is session.root:
            session.bound = call_dims(self.fn, self.args, self.kwargs, sizes)


def _moved(events: list[Event], first: Frame, frame: Frame) -> list[Event]:
    """Copies of a block's events for another call of it: its call chain, new op groups."""
    depth = len(first.calls)
    serials: dict[int, int] = {}
    moved: list[Event] = []
    cut = len(first.path)
    for event in events:
        serial = serials.setdefault(event.group.serial, new_serial())
        # A shallow copy (dataclasses.replace and copy.copy are 10x slower on 10^5 events);
        # the copy shares the original's `backward` list, filled once after the run.
        copy = object.__new__(Event)
        copy.__dict__.update(event.__dict__)
        copy.origin = event.origin or event
        copy.group = Group(event.group.name, event.group.pattern, serial)
        copy.calls = (*frame.calls, *event.calls[depth:])
        copy.path = (*frame.path, *event.path[cut:])
        moved.append(copy)
    return moved


def begin_call(
    frame: Frame,
    fn: CheckedFunction[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    cached: bool = True,
) -> CallHandle:
    """Open a decorated call while a session (a dry run or ``record()``) is counting.

    ``cached=False`` counts the call even when its cost is known (an async body, whose
    awaits let other tasks run in the meantime, is never run with counting paused).
    """
    session = frame.session
    if isinstance(session, RecordSession):
        kind, child, row = session.begin(frame, fn, args, kwargs, fresh=not cached)
        return CallHandle(session, child, fn, args, kwargs, row, kind)
    assert isinstance(session, RunSession)
    child = session.child(fn.name, fn.declared is not None)
    if child is frame:
        return CallHandle(session, child, fn, args, kwargs, None, "inline")
    handle = CallHandle(session, child, fn, args, kwargs, None, "count")
    if cached and fn.declared is None:
        try:
            # Inside a checkpoint region the same block saves nothing: not alike.
            saving = session.saved is not None and session.saved.active()
            key: Any = (id(fn), structural_signature(args, kwargs, session.structures), saving)
            hash(key)
        except TypeError:
            return handle
        known = session.blocks.get(key)
        if known is not None:
            handle.kind = "replay"
            handle.replay = (key, known[0], known[1], known[2] if session.saved else None)
        else:
            handle.replay = (key, child, [], None)
            handle.start = len(session.events)
            handle.mark = session.saved.mark() if session.saved is not None else 0
    return handle


def counted_call(
    frame: Frame,
    fn: CheckedFunction[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    bound: Callable[[], Mapping[str, Size]],
    body: Callable[[], Any],
) -> Any:
    """Run a decorated call while a session is counting."""
    handle = begin_call(frame, fn, args, kwargs)
    with handle.scope():
        result = body()
    handle.finish(bound(), result)
    return result
