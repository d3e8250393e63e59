"""A decorated call while a session counts: which frame its ops go to, or, for a call whose
cost is already known (a ``record()`` row seen before, a block repeated in a dry run), run
with counting out of the way and its known events or counts reused."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from .counter import suspended
from .events import Event, Group, new_serial
from .fit import Size, evaluate, size_value
from .frames import Frame, in_frame
from .recorder import CountedFunction, RecordSession, Row
from .session import RunSession, Session, declared_event
from .signature import structural_signature

__all__ = ["CallHandle", "begin_call", "counted_call"]


class CallHandle:
    """One decorated call while a session counts.

    ``kind`` is ``"count"`` (its ops go to ``frame``), ``"inline"`` (part of a declared
    call's body: its ops go to the enclosing frame), ``"cached"`` (a ``record()`` row seen
    before) or ``"replay"`` (a block repeated in a dry run: its first call's events are
    copied); the last two run the body with counting out of the way.
    """

    __slots__ = ("args", "fn", "frame", "kind", "kwargs", "replay", "row", "session", "start")

    def __init__(
        self,
        session: Session,
        frame: Frame | None,
        fn: CountedFunction,
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
        self.replay: tuple[Any, Frame, list[Event]] | None = None

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """The context the body runs in: its frame, or counting out of the way."""
        if self.kind in ("cached", "replay"):
            stack = contextlib.ExitStack()
            stack.enter_context(suspended(self.session.mode))
            stack.enter_context(in_frame(None))
            return stack
        return in_frame(self.frame)

    def finish(self, bound: Mapping[str, Size]) -> None:
        """Close the call after its body returned and its return value passed the checks."""
        session = self.session
        if isinstance(session, RecordSession):
            session.finish(self.kind, self.row, self.frame, self.fn, self.args, self.kwargs, bound)
            return
        assert isinstance(session, RunSession) and self.frame is not None
        if self.kind == "replay":
            assert self.replay is not None
            _, first, events = self.replay
            session.events.extend(_moved(events, first, self.frame))
            return
        sizes = dict(bound)
        declared = self.fn.declared
        parent = self.frame.parent
        if self.kind == "count" and declared is not None:
            dims = self.fn.call_dims(self.args, self.kwargs, sizes)
            value = int(evaluate(declared, {k: size_value(v) for k, v in dims.items()}))
            session.events.append(declared_event(self.fn.name, value, self.frame))
        if self.kind == "count" and self.replay is not None:
            key, _, _ = self.replay
            session.blocks[key] = (self.frame, session.events[self.start :])
        if self.kind == "count" and parent is session.root:
            session.bound = self.fn.call_dims(self.args, self.kwargs, sizes)


def _moved(events: list[Event], first: Frame, frame: Frame) -> list[Event]:
    """Copies of a block's events for another call of it: its call chain, new op groups."""
    depth = len(first.calls)
    serials: dict[int, int] = {}
    moved: list[Event] = []
    for event in events:
        serial = serials.setdefault(event.group.serial, new_serial())
        moved.append(
            dataclasses.replace(
                event,
                group=Group(event.group.name, event.group.pattern, serial),
                calls=(*frame.calls, *event.calls[depth:]),
                path=(*frame.path, *event.path[len(first.path) :]),
            )
        )
    return moved


def begin_call(
    frame: Frame,
    fn: CountedFunction,
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
            key: Any = (id(fn), structural_signature(args, kwargs))
            hash(key)
        except TypeError:
            return handle
        known = session.blocks.get(key)
        if known is not None:
            handle.kind = "replay"
            handle.replay = (key, known[0], known[1])
        else:
            handle.replay = (key, child, [])
            handle.start = len(session.events)
    return handle


def counted_call(
    frame: Frame,
    fn: CountedFunction,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    bound: Callable[[], Mapping[str, Size]],
    body: Callable[[], Any],
) -> Any:
    """Run a decorated call while a session is counting."""
    handle = begin_call(frame, fn, args, kwargs)
    with handle.scope():
        result = body()
    handle.finish(bound())
    return result
