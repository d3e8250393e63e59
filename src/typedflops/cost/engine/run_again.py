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

Selective activation checkpointing (``context_fn=create_selective_checkpoint_contexts``)
keeps the outputs of the ops its policy saves: backward takes them from its storage instead
of running them again. Such an op is found under torch's caching mode, above the counting
mode on the stack, and is counted run again only if that mode stored no output for it.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

import torch.utils.checkpoint as _checkpoint

from .events import Event, named_event
from .saved import top_pack_hook
from .stack import frame_of

__all__ = ["RunAgain", "region_frame"]

#: The event standing for each run of pending ops found to run again, kept by those ops.
_RERUNS: dict[tuple[Event, ...], Event] = {}
_RERUNS_LIMIT = 4096


def _none() -> None:
    return None


#: Selective checkpointing's mode over a region's forward, which stores the outputs its
#: policy saves, and the mark it stores for an op run again instead.
_CACHING = getattr(_checkpoint, "_CachingTorchDispatchMode", None)
_CACHING_CODE = getattr(
    inspect.unwrap(getattr(_CACHING, "__torch_dispatch__", _none)), "__code__", None
)  # (torch wraps a mode's __torch_dispatch__ to keep dynamo out)
_RECOMPUTE = getattr(_checkpoint, "_RECOMPUTE", None)
_STORAGE_KEY: Callable[[Any, Any], Any] = getattr(
    _checkpoint, "_sac_storage_key", lambda func, args: func
)
# How far up the stack from the counting mode's op the caching mode's call is looked for
# (torch's dispatch between them, and an op decomposed inside the counting mode).
_CACHING_DEPTH = 24

#: Where selective checkpointing keeps an op's output: its storage, key and index.
_Stored = tuple[Any, Any, int]


def _stored_at() -> _Stored | None:
    """Where the caching mode of a selectively checkpointed region will keep the output of
    the op it runs now (the op that an op counted now is, or is part of), or None."""
    if _CACHING_CODE is None:
        return None
    frame = frame_of(_CACHING_CODE, _CACHING_DEPTH, 3)
    if frame is None:
        return None
    found = frame.f_locals
    mode = found.get("self")
    storage = getattr(mode, "storage", None)
    counter = getattr(mode, "func_counter", None)
    if storage is None or counter is None:
        return None
    key = _STORAGE_KEY(found.get("func"), found.get("args", ()))
    return storage, key, counter.get(key, 0)


def _runs_again(stored: _Stored | None) -> bool:
    """Whether an op runs again in backward: selective checkpointing kept no output of it."""
    if stored is None:
        return True
    storage, key, index = stored
    outputs = storage.get(key)
    return outputs is None or outputs.get(index, _RECOMPUTE) is _RECOMPUTE


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
    __slots__ = ("early_stop", "frame", "holders", "mark", "pending", "stored")

    def __init__(self, frame: Any) -> None:
        self.frame = weakref.ref(frame)
        self.holders: list[Any] = frame.weak_holders
        self.early_stop = bool(getattr(frame, "early_stop", True))
        self.mark = 0
        self.pending: list[Event] = []
        # (by pending op: where selective checkpointing keeps its output, if it does)
        self.stored: list[_Stored | None] = []

    def run_again(self) -> tuple[Event, ...]:
        """The pending ops that backward runs again (not those whose output is kept)."""
        return tuple(
            event
            for event, stored in zip(self.pending, self.stored, strict=True)
            if _runs_again(stored)
        )

    def clear(self) -> None:
        self.pending = []
        self.stored = []

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
        region.stored.append(_stored_at())

    def settle(self) -> None:
        """Count the pending ops a tensor was saved after; drop the tail of regions whose
        forward completed."""
        kept: list[_Region] = []
        for region in self.regions:
            ended = region.ended()
            if len(region.holders) > region.mark or (ended and not region.early_stop):
                events = region.run_again()
                if events:
                    self.place(_rerun(events))
                region.clear()
            if not ended:
                kept.append(region)
            elif region.pending:
                region.clear()  # ran after the region's last save: not run again
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
