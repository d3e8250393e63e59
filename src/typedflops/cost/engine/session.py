"""Sessions that collect events: a dry run's flat list (``record()``'s tree of rows is in
:mod:`.recorder`). The counting mode hands each op's event to the innermost frame of the
session it belongs to."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from .counter import CountingMode, counting
from .events import Event, Group
from .frames import Frame, current_frame, in_frame
from .known_values import KnownValues
from .saved import SavedTensors
from .saved_reads import note_saved

__all__ = ["RunSession", "Session", "declared_event"]


class Session:
    """Where the events of one ``record()`` block or one dry run go."""

    mode: CountingMode | None = None

    def add(self, event: Event) -> None:
        """Hand an event to the innermost frame of this session (others' ops are ignored)."""
        frame = current_frame()
        if frame is not None and frame.session is self:
            frame.add(event)


class RunSession(Session):
    """A dry run: a flat list of events, each with the path of decorated calls it ran in."""

    def __init__(self, function: str, target: str | None = None, on_meta: bool = True) -> None:
        self.events: list[Event] = []
        self.root = Frame(self, (), None, self.events)
        self.function = function
        self.bound: dict[str, Any] = {}
        self.target = target
        # Whether the run is on meta tensors (not under FakeTensorMode): real tensors the
        # body reaches take part through meta copies, and values that shapes fix are kept.
        self.on_meta = on_meta
        # The events of each block called so far, by its structural signature: a block
        # called again alike (the next of 48 identical layers) is not counted again: its
        # first call's events are copied, and its body is skipped where its result can be
        # made from its first call's (see .calls).
        self.blocks: dict[Any, tuple[Frame, list[Event], Any, Any]] = {}
        # Modules' structures by identity (they do not change during a run).
        self.structures: dict[int, Any] = {}
        # What autograd saves for backward during the run (set by the dry run).
        self.saved: SavedTensors | None = None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Count the ops run inside the block into this session."""
        with counting(self, target=self.target, dry=self.on_meta) as mode, in_frame(self.root):
            self.mode = mode
            if not self.on_meta:  # (under FakeTensorMode: index bounds, see .known_values)
                mode.bounds = KnownValues()
            if self.saved is not None:  # (a backward the body runs may read them again)
                mode.sums.reads.kept = self.saved.saved_for
                self.saved.on_save = functools.partial(note_saved, mode.sums)
            try:
                yield
            finally:
                if mode.again.regions:
                    mode.again.settle()
                self.mode = None

    def child(self, function: str, declared: bool) -> Frame:
        """A frame for a decorated call made inside the current one."""
        parent = current_frame()
        assert parent is not None and parent.session is self
        if parent.declared or parent.inside_declared():
            return parent  # inside a declared call, nested calls are part of its body
        return Frame(self, (*parent.path, function), parent, self.events, declared)


def declared_event(function: str, flops: int, frame: Frame | None = None) -> Event:
    """The event standing for a ``flops=`` declaration: its count, no rule, no tensors."""
    event = Event(
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
        path=frame.path if frame is not None else (),
        calls=frame.calls if frame is not None else (),
    )
    return event
