"""Sessions that collect events: a dry run's flat list, or ``record()``'s tree of rows.

While a session is active, every ``@typed_flops`` call opens a :class:`Frame` (its path in
the nesting of decorated calls), and the counting mode hands each op's event to the
innermost frame of its own session. A frame whose function declares ``flops=`` takes the
declared count in place of the forward FLOPs of everything it runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from .counter import CountingMode, Event, Group, counting

__all__ = [
    "Frame",
    "RunSession",
    "Session",
    "current_frame",
    "declared_event",
    "no_frame",
]


class Session:
    """Where the events of one ``record()`` block or one dry run go."""

    mode: CountingMode | None = None

    def add(self, event: Event) -> None:
        """Hand an event to the innermost frame of this session (others' ops are ignored)."""
        frame = _frame.get()
        if frame is not None and frame.session is self:
            frame.add(event)


class Frame:
    """One decorated call being counted (or a session's root)."""

    __slots__ = ("declared", "events", "parent", "path", "row", "session")

    def __init__(
        self,
        session: Session,
        path: tuple[str, ...],
        parent: Frame | None,
        events: list[Event],
        declared: bool = False,
    ) -> None:
        self.session = session
        self.path = path
        self.parent = parent
        self.events = events
        self.declared = declared
        self.row: Any = None

    def add(self, event: Event) -> None:
        """Keep an event, with this frame's path (forward FLOPs zeroed under ``flops=``)."""
        event.path = self.path
        if self.declared or self.inside_declared():
            event.flops = 0
        self.events.append(event)

    def inside_declared(self) -> bool:
        """Whether an enclosing frame declares ``flops=`` (its body's counts are replaced)."""
        parent = self.parent
        while parent is not None:
            if parent.declared:
                return True
            parent = parent.parent
        return False


_frame: ContextVar[Frame | None] = ContextVar("typedflops_frame", default=None)


def current_frame() -> Frame | None:
    """The innermost frame being counted, or None (the hot path: nothing is recording)."""
    return _frame.get()


@contextlib.contextmanager
def in_frame(frame: Frame | None) -> Iterator[None]:
    """Make ``frame`` the current one inside the block."""
    token = _frame.set(frame)
    try:
        yield
    finally:
        _frame.reset(token)


def no_frame() -> contextlib.AbstractContextManager[None]:
    """Count nothing into any session inside the block (typedflops' own replays)."""
    return in_frame(None)


class RunSession(Session):
    """A dry run: a flat list of events, each with the path of decorated calls it ran in."""

    def __init__(self, function: str) -> None:
        self.events: list[Event] = []
        self.root = Frame(self, (), None, self.events)
        self.function = function
        self.bound: dict[str, Any] = {}

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Count the ops run inside the block into this session."""
        with counting(self) as mode, in_frame(self.root):
            self.mode = mode
            try:
                yield
            finally:
                self.mode = None

    def child(self, function: str, declared: bool) -> Frame:
        """A frame for a decorated call made inside the current one."""
        parent = _frame.get()
        assert parent is not None and parent.session is self
        if parent.declared or parent.inside_declared():
            return parent  # inside a declared call, nested calls are part of its body
        return Frame(self, (*parent.path, function), parent, self.events, declared)


def declared_event(function: str, flops: int, path: tuple[str, ...]) -> Event:
    """The event standing for a ``flops=`` declaration: its count, no rule, no tensors."""
    return Event(
        op="declared",
        func=None,
        group=Group(function, None, -1),
        args=(),
        kwargs=(),
        out=None,
        flops=flops,
        entry=None,
        counted=True,
        bytes_read=0,
        bytes_written=0,
        view=False,
        needs_grad=False,
        torch_counted=False,
        path=path,
    )


def frame_of(session: Any) -> Frame | None:
    """The current frame if it belongs to ``session``."""
    frame = _frame.get()
    return frame if frame is not None and frame.session is session else None
