"""What calls ran, summed: the counts a ``record()`` row and its total are made of."""

from __future__ import annotations

from .backward import backward_of
from .events import Event

__all__ = ["Counts"]


class Counts:
    """What one call of a work ran: FLOPs (forward, backward, of matrix products, run
    again in backward), bytes, the FLOPs FlopCounterMode has formulas for, the names
    of ops without a rule, and what counts took as given of values they had not."""

    __slots__ = (
        "assumed",
        "backward",
        "events",
        "forward",
        "matmul",
        "read",
        "recompute",
        "torch_backward",
        "torch_forward",
        "uncounted",
        "written",
    )

    def __init__(self) -> None:
        self.forward = self.backward = self.read = self.written = self.events = 0
        self.matmul = self.recompute = self.torch_forward = self.torch_backward = 0
        self.uncounted: dict[str, None] = {}
        self.assumed: dict[str, None] = {}  # (see .skipped_work)

    def add_event(self, event: Event, times: int = 1) -> None:
        """Add an op that ran ``times`` times."""
        flops = event.flops * times
        self.events += times
        self.forward += flops
        self.read += event.bytes_read * times
        self.written += event.bytes_written * times
        self.matmul += event.matmul_flops * times
        if event.recomputed:
            self.recompute += flops
        if event.torch_counted:
            self.torch_forward += flops
        if not event.counted:
            self.uncounted[event.op] = None
        if event.assumed is not None:
            self.assumed[event.assumed] = None
        if event.needs_grad:
            found = backward_of(event)
            self.backward += found.flops * times
            if event.rerun:  # (a Function's backward that ran its forward again)
                self.recompute += times * sum(e.flops for e in event.rerun)
            self.torch_backward += times * sum(e.flops for e in found.events if e.torch_counted)
            self.uncounted.update(dict.fromkeys(found.uncounted))
            self.assumed.update(dict.fromkeys(e.assumed for e in found.events if e.assumed))

    def add(self, other: Counts, times: int = 1) -> None:
        """Add another work's counts, ``times`` calls of it."""
        for name in _NUMBERS:
            setattr(self, name, getattr(self, name) + times * getattr(other, name))
        self.uncounted.update(other.uncounted)
        self.assumed.update(other.assumed)


_NUMBERS = tuple(name for name in Counts.__slots__ if name not in ("uncounted", "assumed"))
