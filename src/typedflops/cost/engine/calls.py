"""A decorated call while a dry run counts: which frame its ops go to, or, for a block
repeated in the run, run with counting out of the way and its first call's events reused.
(``record()`` counts every call as it ran: see :mod:`.recorder`.)"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ...contract.function import CheckedFunction
from .counter import suspended
from .edges import Role, role_tensor, roles
from .events import Event, Group, new_serial
from .fit import Size, size_value
from .frames import Frame, in_frame, owned_by
from .kernels import TargetKernels
from .probes import call_dims
from .rules import declared_flops
from .session import RunSession, declared_event
from .shortcut import Shortcut, shortcut_of, stand_in
from .signature import structural_signature

__all__ = ["CallHandle", "begin_call", "counted_call"]


class CallHandle:
    """One decorated call while a dry run counts.

    ``kind`` is ``"count"`` (its ops go to ``frame``), ``"inline"`` (part of a declared
    call's body: its ops go to the enclosing frame) or ``"replay"`` (a block repeated in
    the run: its first call's events are copied, the body runs with counting out of the
    way, or not at all where its first call returned a fresh tensor: see :mod:`.shortcut`).
    """

    __slots__ = (
        "args",
        "fn",
        "frame",
        "kind",
        "kwargs",
        "mark",
        "reached",
        "replay",
        "session",
        "start",
        "uses",
    )

    def __init__(
        self,
        session: RunSession,
        frame: Frame,
        fn: CheckedFunction[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        kind: str,
    ) -> None:
        self.session = session
        self.frame = frame
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.kind = kind
        self.start = 0
        self.mark = 0
        self.replay: tuple[Any, Frame, list[Event], Shortcut | None] | None = None
        # A block's first call: the tensors it reaches from outside, with their edges
        # before it ran; a repeat: the edges its first call made to each (see .fan_in).
        self.reached: list[tuple[Role, torch.Tensor, int]] = []
        self.uses: tuple[tuple[Role, int], ...] = ()

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
        assert shortcut is not None and self.session.saved is not None
        return stand_in(shortcut, self.frame, args, kwargs, self.session.saved)

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """The context the body runs in: its frame, or counting out of the way; the call
        owns what autograd saves while it runs (repeated or not)."""
        stack = contextlib.ExitStack()
        stack.enter_context(owned_by(self.frame))
        if self.kind == "replay":
            stack.enter_context(suspended(self.session.mode))
            stack.enter_context(in_frame(None))
            target = self.session.target
            if target is not None:
                stack.enter_context(TargetKernels(target))
        else:
            stack.enter_context(in_frame(self.frame))
        return stack

    def finish(self, bound: Mapping[str, Size], result: Any = None) -> None:
        """Close the call after its body returned ``result`` and it passed the checks."""
        session = self.session
        if self.kind == "replay":
            assert self.replay is not None
            _, first, events, _ = self.replay
            session.events.extend(_moved(events, first, self.frame))
            self._edges_again()
            return
        if self.kind == "count" and session.mode is not None:
            with in_frame(self.frame):  # (its result, held, reaches backward: its own)
                session.mode.sums.settle(boundary=True)
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
            events, uses = self._edges_made(session.events[self.start :])
            session.blocks[key] = (self.frame, events, shortcut, uses)
        if self.kind == "count" and parent is session.root:
            session.bound = call_dims(self.fn, self.args, self.kwargs, sizes)

    def _edges_made(self, events: list[Event]) -> tuple[list[Event], tuple[tuple[Role, int], ...]]:
        """A first call's events for its repeats, less the sums of gradients of the tensors
        it reaches from outside, and the edges it made to each: a repeat makes its own."""
        mode = self.session.mode
        if mode is None or not self.reached:
            return events, ()
        sums = mode.sums
        uses = tuple(
            (role, sums.count(tensor) - before)
            for role, tensor, before in self.reached
            if sums.count(tensor) > before
        )
        sources = {id(tensor) for _, tensor, _ in self.reached}
        return [event for event in events if event.source not in sources], uses

    def _edges_again(self) -> None:
        """A repeat's edges to the tensors it reaches from outside, as its first call's."""
        mode = self.session.mode
        if mode is None or not self.uses:
            return
        with in_frame(self.frame):
            for role, edges in self.uses:
                tensor = role_tensor(role, self.args, self.kwargs)
                if tensor is not None:
                    mode.sums.use(tensor, edges)


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
    """Open a decorated call while a dry run is counting.

    ``cached=False`` counts the call even when its cost is known (an async body, whose
    awaits let other tasks run in the meantime, is never run with counting paused).
    """
    session = frame.session
    assert isinstance(session, RunSession)
    if session.mode is not None:
        # (what made its arguments reaches backward: counted where it was made, outside it)
        session.mode.sums.settle(boundary=True)
    child = session.child(fn.name, fn.declared is not None)
    if child is frame:
        return CallHandle(session, child, fn, args, kwargs, "inline")
    handle = CallHandle(session, child, fn, args, kwargs, "count")
    if cached and fn.declared is None:
        saving = session.saved is not None and session.saved.active()
        if session.saved is not None and not saving:
            # Inside a checkpoint region (or the user's saved-tensor hooks): what backward
            # runs again depends on where each op falls among the region's saves, which a
            # copy of another call's events does not say: every call runs, seen op by op.
            return handle
        try:
            key: Any = (id(fn), structural_signature(args, kwargs, session.structures), saving)
            hash(key)
        except TypeError:
            return handle
        known = session.blocks.get(key)
        if known is not None:
            handle.kind = "replay"
            handle.replay = (key, known[0], known[1], known[2] if session.saved else None)
            handle.uses = known[3]
        else:
            handle.replay = (key, child, [], None)
            handle.start = len(session.events)
            handle.mark = session.saved.mark() if session.saved is not None else 0
            if session.mode is not None:
                sums = session.mode.sums
                handle.reached = [(r, t, sums.count(t)) for r, t in roles(args, dict(kwargs))]
    return handle


def counted_call(
    frame: Frame,
    fn: CheckedFunction[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    bound: Callable[[], Mapping[str, Size]],
    body: Callable[[], Any],
) -> Any:
    """Run a decorated call while a dry run is counting."""
    handle = begin_call(frame, fn, args, kwargs)
    with handle.scope():
        result = body()
    handle.finish(bound(), result)
    return result
