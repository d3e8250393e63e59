"""Which ops of a ``torch.utils.checkpoint`` region (the default, non-reentrant kind) run again
in backward.

Backward runs a region's forward again to rebuild the tensors it saved, and by default
(``early_stop``) stops as soon as the last of them is saved again. A tensor is saved when
autograd records an op (its inputs before the kernel runs, its output after), so an op runs
again only if a tensor is saved after it starts: the ops after the region's last save
(a final product whose inputs were saved before it ran, a residual add) never run again.
The region keeps a holder per tensor it saves (its frame's ``weak_holders``); each op run in
it is pending until that list grows past its length when the op ran, and is then counted as
run again, in one event (``rerun``) placed where the growth was seen. Ops still pending when
the region's forward has completed are its tail and are dropped; with ``early_stop`` off,
every op runs again.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from .events import Event, named_event
from .saved import top_pack_hook

__all__ = ["RunAgain", "region_frame"]

#: The event standing for each run of pending ops found to run again, kept by those ops.
_RERUNS: dict[tuple[Event, ...], Event] = {}
_RERUNS_LIMIT = 4096


def region_frame() -> Any:
    """The frame torch keeps for the checkpointed region whose forward runs now (None
    outside one): read from the closure of the hook that saves its tensors."""
    pack = top_pack_hook()
    if pack is None or "_checkpoint_hook" not in getattr(pack, "__qualname__", ""):
        return None
    for cell in getattr(pack, "__closure__", None) or ():
        try:
            found = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if type(getattr(found, "weak_holders", None)) is list:
            return found
    return None


class _Region:
    __slots__ = ("early_stop", "frame", "holders", "mark", "pending")

    def __init__(self, frame: Any) -> None:
        self.frame = weakref.ref(frame)
        self.holders: list[Any] = frame.weak_holders
        self.early_stop = bool(getattr(frame, "early_stop", True))
        self.mark = 0
        self.pending: list[Event] = []

    def ended(self) -> bool:
        frame = self.frame()
        return frame is None or bool(getattr(frame, "forward_completed", False))


class RunAgain:
    """The checkpointed regions of one counting mode with ops pending (see the module).
    ``place`` puts an event where the ops run now."""

    __slots__ = ("place", "regions")

    def __init__(self, place: Callable[[Event], None]) -> None:
        self.place = place
        self.regions: list[_Region] = []

    def op(self, event: Event, frame: Any) -> None:
        """An op ran (``frame``: its region's, from :func:`region_frame`, or None)."""
        if self.regions:
            self.settle()
        if frame is None:
            return
        for region in self.regions:
            if region.frame() is frame:
                break
        else:
            region = _Region(frame)
            self.regions.append(region)
        region.mark = len(region.holders)
        region.pending.append(event)

    def settle(self) -> None:
        """Count the pending ops a tensor was saved after; drop the tail of regions whose
        forward completed."""
        kept: list[_Region] = []
        for region in self.regions:
            ended = region.ended()
            if len(region.holders) > region.mark or (ended and not region.early_stop):
                self.place(_rerun(tuple(region.pending)))
                region.pending = []
            if not ended:
                kept.append(region)
            elif region.pending:
                region.pending = []  # ran after the region's last save: not run again
        self.regions = [region for region in kept if region.pending]


def _rerun(events: tuple[Event, ...]) -> Event:
    found = _RERUNS.get(events)
    if found is None:
        if len(_RERUNS) >= _RERUNS_LIMIT:
            _RERUNS.clear()
        found = _RERUNS[events] = named_event("checkpoint (run again)", 0)
        found.needs_grad = True
        found.rerun = list(events)
    return found
