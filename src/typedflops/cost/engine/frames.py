"""Frames: the decorated call being counted, per thread and asyncio task.

While a session is active, every ``@typed_flops`` call opens a :class:`Frame` (its path in
the nesting of decorated calls); each op's event goes to the innermost frame of its own
session. A frame whose function declares ``flops=`` takes the declared count in place of
the forward FLOPs of everything it runs.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from ...contract.function import counting_frame
from .events import Event

__all__ = ["Frame", "current_frame", "in_frame", "no_frame", "owned_by", "owner", "quiet"]


class Frame:
    """One decorated call being counted (or a session's root), in a session (a dry run or a
    ``record()`` block) that its events are handed to."""

    __slots__ = ("calls", "declared", "events", "parent", "path", "row", "session")

    def __init__(
        self,
        session: Any,
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
        # The call instances it runs in, outermost first (a path names functions; this
        # tells two calls of one function apart).
        self.calls: tuple[int, ...] = () if parent is None else (*parent.calls, next(_serials))

    def add(self, event: Event) -> None:
        """Keep an event, with this frame's path (forward FLOPs zeroed under ``flops=``)."""
        event.path = self.path
        event.calls = self.calls
        if self.declared or self.inside_declared():
            event.flops = event.matmul_flops = 0
        self.events.append(event)

    def inside_declared(self) -> bool:
        """Whether an enclosing frame declares ``flops=`` (its body's counts are replaced)."""
        parent = self.parent
        while parent is not None:
            if parent.declared:
                return True
            parent = parent.parent
        return False


# The checked call reads the current frame from the contract's variable (its one hook).
_frame: ContextVar[Frame | None] = counting_frame
# The decorated call whose body is running, also when its ops are not counted (a block
# repeated in a dry run): what autograd saves for backward is attributed to it.
_owner: ContextVar[Frame | None] = ContextVar("typedflops_owner", default=None)
_serials = itertools.count(1)


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
        try:  # noqa: SIM105 (a context manager costs more, here on each call)
            _frame.reset(token)
        except LookupError:  # (gone already: see contract.scope.call_scope)
            pass


@contextlib.contextmanager
def no_frame() -> Iterator[None]:
    """Count nothing into any session inside the block (typedflops' own replays): no
    record open on this thread counts it either (see :mod:`.live_records`)."""
    token = _frame.set(None)
    held = _quiet.set(True)
    try:
        yield
    finally:
        try:
            _quiet.reset(held)
            _frame.reset(token)
        except LookupError:  # (gone already: see contract.scope.call_scope)
            pass


# Set inside no_frame(): what runs there is typedflops' own work, not a context copied
# before a record opened.
_quiet: ContextVar[bool] = ContextVar("typedflops_quiet", default=False)
quiet = _quiet.get


def owner() -> Frame | None:
    """The innermost decorated call being run in a session, counted or repeated."""
    return _owner.get()


@contextlib.contextmanager
def owned_by(frame: Frame | None) -> Iterator[None]:
    """Make ``frame`` the owner of what runs inside the block (see :func:`owner`)."""
    token = _owner.set(frame)
    try:
        yield
    finally:
        try:  # noqa: SIM105 (a context manager costs more, here on each call)
            _owner.reset(token)
        except LookupError:  # (gone already: see contract.scope.call_scope)
            pass
