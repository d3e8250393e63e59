"""Views held where a decorated call begins or returns, whose edge may yet reach nothing.

A view is a node of its own with one edge to what it views (``h.unsqueeze(0)``) until its
base is written in place: autograd then makes the view a new node the next time it is
read, with an edge to the base as written (see :func:`.in_place.regenerate`), and nothing
reaches its view op's node. Where a view is held at a decorated call's boundary (the call's
result, a slice made before the call), :meth:`.fan_in.GradientSums.settle` decides that a
backward may start from it and counts its view op's edge there, in the call's row, as a
dry run of the call alone does. The edge is noted until something reaches the view (an
edge to it is counted: an op that differentiates it reaches backward; what an op writing
in place reads reaches before its write), and taken back if its base is written first: its
count, and a sum it or a later edge added because of it (the next edge counted to the same
tensor adds one sum less). A sum an edge adds while a held view's edge to the same tensor
may yet be taken back (its own too) waits (:func:`defer`): taking the edge back drops it;
once none may (the view reached, the block ended), it is counted where that happens
(:func:`release`; the row of a call that has returned takes no more events).
A view written itself, no op having read it, keeps its edge: it stands for the edge
autograd's ``CopySlices`` gives the base (see :mod:`.in_place`).

A view op's own backward where it computes (``expand``'s sum, a view's node made again)
waits with its edge (:func:`_backs`): taken off where the op ran, counted where the view is
reached (or a result: let go, the block ended), dropped if it is taken back, the view made
again then costing its own (``as_strided``'s sum over its expanded dims) when read.
Not taken back: the ops that made what the view read (they stay reached).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from .events import Event
from .waits import Waiting, WaitingOutput

__all__ = [
    "Deferred",
    "HeldSums",
    "HeldView",
    "defer",
    "hold",
    "reached",
    "read_held",
    "release",
    "take_credit",
    "written_views",
]

#: Sums an edge added where a held view's edge to the same tensor may yet be taken back:
#: how many, the edge (its tensor's size and dtype), and where it was counted.
Deferred = tuple[int, Any, Any]


_LIMIT = 4096
_EXPAND = torch.ops.aten.expand.default


class HeldSums(Protocol):
    """What of :class:`.fan_in.GradientSums` a held view reads and changes."""

    uses: dict[Any, int]
    held_views: dict[int, HeldView]
    view_parents: dict[int, tuple[weakref.ref[torch.Tensor], list[int]]]
    credits: dict[Any, int]
    deferred: dict[Any, list[Deferred]]
    holding: bool
    realm: Callable[[Any], Any] | None
    where: Callable[[], Any] | None

    def _live(self, waiting: Waiting) -> None: ...
    def hand_sum(self, adds: int, edge: Any, context: Any) -> None: ...
    def _hand(self, event: Event, context: Any) -> None: ...


class HeldView:
    """A view held at a call's boundary whose edge was counted there: the view and its
    base (weakly), the keys in ``uses`` of the edges its view ops added (those that added
    no sum), those view ops (``ops``), their own backward where it computes, waiting
    (``backs``: an expand's, a view's node made again), and the held views it views
    (``parents``: reached through it)."""

    __slots__ = ("backs", "base", "keys", "ops", "parents", "ref", "stands")

    def __init__(
        self,
        ref: weakref.ref[torch.Tensor],
        base: weakref.ref[torch.Tensor],
        keys: list[Any],
        ops: list[Waiting],
        parents: list[int],
        stands: bool,
    ) -> None:
        self.ref = ref
        self.base = base
        self.keys = keys
        self.ops = ops
        self.parents = parents
        self.backs = _backs(ops)
        # Whether its edge goes to its base itself (it stands for CopySlices' if written).
        self.stands = stands


def hold(sums: HeldSums, output: WaitingOutput) -> None:
    """Count the edges of ``output``'s op, decided at a call's boundary, noting them if it
    is a view's (see module): its own and those of the view ops it alone read
    (``h.unsqueeze(0).expand(2, n)``), and of a view's node made again that it alone read
    (``s[1:]`` of a slice ``s`` read after its base was written: reached through it only).
    A view op's node whose view is still alive (``s = h[1:]`` read by a held ``s.t()``,
    maybe by a held expand of ``s`` too), none of its readers reached yet, is noted as a
    held view of its own, which each of them views: reached if one of them is or an op
    reads ``s`` later, taken back with them."""
    waiting = output.waiting
    view = output.ref()
    if view is None or view._base is None or not _viewing(waiting):
        sums._live(waiting)
        return
    held = _entry(sums, view, waiting)
    pending = sums.view_parents.pop(id(view), None)
    if pending is not None and pending[0]() is view:
        held.parents.extend(key for key in pending[1] if key not in held.parents)
    _note(sums, view, held)  # (first: a sum its own edges add waits, see defer)
    sums.holding = True
    try:
        sums._live(waiting)
    finally:
        sums.holding = False


def _entry(sums: HeldSums, view: torch.Tensor, waiting: Waiting) -> HeldView:
    """The note of a held view ``view`` whose view op waits (``waiting``), its edges not
    counted yet: the edges of the view ops it alone reaches, the held views they read, and
    (noted first, see :func:`hold`) the view ops' nodes others read too."""
    keys: list[Any] = []
    ops: list[Waiting] = []
    parents: list[int] = []
    chain, viewed = [waiting], None
    while chain:
        found = chain.pop()
        ops.append(found)
        for ref, _, leaf, _, _, history, call in found.inputs or ():
            realm = sums.realm(found.context) if sums.realm is not None else None
            key = (ref, realm, history, call if leaf else None)
            keys.append(key)
            if viewed is None:
                viewed = ref()
        for source in found.sources:
            tensor = source.ref()
            if tensor is not None and _holds(sums, tensor, False):
                if id(tensor) not in parents:
                    parents.append(id(tensor))
            elif source.done or not _viewing(source.waiting):
                continue
            elif tensor is None:  # (a temporary: read by nothing else from now on)
                if source.readers <= 1:
                    chain.append(source.waiting)
            elif tensor._base is not None:  # (an op may read it yet: reached then)
                _note(sums, tensor, _entry(sums, tensor, source.waiting))
                parents.append(id(tensor))
    if viewed is not None and _holds(sums, viewed, False) and id(viewed) not in parents:
        parents.append(id(viewed))
    base = view._base
    assert base is not None
    stands = viewed is base and len(waiting.inputs or ()) <= 1
    return HeldView(weakref.ref(view), weakref.ref(base), keys, ops, parents, stands)


def _note(sums: HeldSums, view: torch.Tensor, held: HeldView) -> None:
    """Note ``held``, the entry of a held view ``view``."""
    views = sums.held_views
    views[id(view)] = held
    if len(views) > _LIMIT:  # (views let go, read by nothing since: nothing to take back)
        for gone in [k for k, found in views.items() if found.ref() is None]:
            _count_backs(sums, views.pop(gone))
        if sums.deferred:
            release(sums)


def take_credit(sums: HeldSums, key: Any, adds: int) -> int:
    """The sums an edge to ``key`` adds, less those a view's edge taken back made before."""
    credit = sums.credits.pop(key, 0)
    if credit > adds:
        sums.credits[key] = credit - adds
    return max(adds - credit, 0)


def _viewing(waiting: Waiting) -> bool:
    """Whether ``waiting`` is a view op's, with one edge (or a view's node made again)."""
    event = waiting.event
    inputs = waiting.inputs
    return (
        (waiting.remade or (event is not None and getattr(event.func, "is_view", False)))
        and inputs is not None
        and len(inputs) == 1
    )


def _backs(ops: list[Waiting]) -> list[Event]:
    """The own backward of a held view's ``ops`` where it computes (an ``expand``'s sum of
    what it repeats, a view's node made again), taken off where they ran to wait: counted
    once the view is reached (or a result), not if it is taken back."""
    found: list[Event] = []
    for op in ops:
        event = op.event
        if op.again is not None:
            found.append(op.again)
            op.again = None
        elif event is not None and event.func is _EXPAND and event.needs_grad:
            found.append(_copy(event, _BACKS, op.places is not None, True))
            if op.places is None:  # (a dry run's own event)
                event.needs_grad = False
                continue
            off = _copy(event, _OFF, True, False)
            for items, index in op.places:
                if index < len(items) and items[index] is event:
                    items[index] = off
    return found


#: A record's expands' backward alone, and the expands without it, by the expand's event
#: (one event for every call alike, as for ops: a call's items the same each time).
_BACKS: dict[Event, Event] = {}
_OFF: dict[Event, Event] = {}


def _copy(event: Event, found: dict[Event, Event], shared: bool, backward: bool) -> Event:
    """``event``'s backward alone (``backward``: a copy with no forward FLOPs or bytes), or
    the op without it (one for every call of it alike, where ``shared``: a record's)."""
    copy = found.get(event) if shared else None
    if copy is None:
        copy = object.__new__(Event)
        copy.__dict__.update(event.__dict__)
        if backward:
            copy.flops = copy.matmul_flops = copy.bytes_read = copy.bytes_written = 0
            copy.backward = list(event.backward)  # (a dry run fills its own)
        else:
            copy.needs_grad = False
        if shared:
            if len(found) > _LIMIT:
                found.clear()
            found[event] = copy
    return copy


def _count_backs(sums: HeldSums, found: HeldView) -> None:
    """Count the own backward that waits on ``found`` (see :func:`_backs`), where the run
    is now."""
    if found.backs:
        now = sums.where() if sums.where is not None else None
        for event in found.backs:
            sums._hand(event, now)
        found.backs = []


def _alive(ref: weakref.ref[torch.Tensor], known: Any, entries: dict[int, Any], key: int) -> bool:
    """Whether an entry is of ``known`` (of a tensor alive, where unknown); one whose
    tensor is gone is dropped."""
    tensor = ref()
    if tensor is None:
        del entries[key]
        return False
    return known is None or tensor is known


def _holds(sums: HeldSums, tensor: torch.Tensor, pending: bool) -> bool:
    """Whether ``tensor`` is a held view (or, if ``pending``, a view op's output that
    reads one)."""
    found = sums.held_views.get(id(tensor))
    if found is not None and found.ref() is tensor:
        return True
    waits = sums.view_parents.get(id(tensor)) if pending else None
    return waits is not None and waits[0]() is tensor


def reached(sums: HeldSums, tensor: torch.Tensor | None) -> None:
    """``tensor``'s node is read (an op that differentiates it, an edge to it counted):
    if it is a view held, its edge stays, and so do those of the held views it views."""
    if tensor is None:
        return
    # (by id, each entry checked to be of the tensor it was made for: an id outlives it)
    stack: list[tuple[int, torch.Tensor | None]] = [(id(tensor), tensor)]
    while stack:
        key, known = stack.pop()
        found = sums.held_views.get(key)
        if found is not None:
            view = found.ref()
            if view is None or known is None or view is known:
                del sums.held_views[key]
                _count_backs(sums, found)  # (reached, or let go: a result)
            if view is not None and (known is None or view is known):
                stack.extend((parent, None) for parent in found.parents)
                continue
        pending = sums.view_parents.get(key)
        if pending is not None and _alive(pending[0], known, sums.view_parents, key):
            del sums.view_parents[key]
            stack.extend((parent, None) for parent in pending[1])
    if not sums.held_views:
        sums.view_parents.clear()
    if sums.deferred:
        release(sums)


def read_held(
    sums: HeldSums,
    chosen: Sequence[torch.Tensor],
    event: Event | None,
    outputs: Sequence[torch.Tensor],
) -> None:
    """An op differentiates ``chosen``: a view op's output reaches the held views it read
    only if it is reached itself (``h.unsqueeze(0)`` held, then ``.view(-1)`` of it), and
    notes them, not the views between (a temporary ``u.unsqueeze(0)`` of ``expand``'s may
    be gone, its id another tensor's); another op reaches them."""
    if event is not None and getattr(event.func, "is_view", False) and len(outputs) == 1:
        held, pending = sums.held_views, sums.view_parents
        parents: list[int] = []  # (the held views it reads, through views of them: a
        for t in chosen:  # temporary between may be gone, its id another's)
            if _holds(sums, t, False):
                parents.append(id(t))
            elif _holds(sums, t, True):
                parents.extend(pending[id(t)][1])
        if parents:
            pending[id(outputs[0])] = (weakref.ref(outputs[0]), parents)
            if len(pending) > _LIMIT:  # (too many to follow: the held views' edges stay,
                for found in held.values():  # as counted where they were held)
                    _count_backs(sums, found)
                held.clear()
                pending.clear()
        return
    for tensor in chosen:
        reached(sums, tensor)


def written_views(sums: HeldSums, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """An op writes ``tensors`` in place: the held views of their bases reach nothing now,
    their edges are taken back; a held view written itself whose edge goes to its base
    keeps it, standing for the base's (returned: no other edge is made for it)."""
    bases = set()
    for tensor in tensors:
        bases.add(id(tensor._base if tensor._base is not None else tensor))
    standing: list[torch.Tensor] = []
    held = sums.held_views
    for key, found in list(held.items()):
        view, viewed = found.ref(), found.base()
        if view is None or viewed is None:
            del held[key]
            _count_backs(sums, found)
            continue
        if id(viewed) not in bases:
            continue
        del held[key]
        if found.stands and any(view is tensor for tensor in tensors):
            standing.append(view)
            _count_backs(sums, found)
            continue
        for edge in found.keys:
            count = sums.uses.get(edge, 0)
            if count > 0:
                sums.uses[edge] = count - 1
            # (a later edge added a sum this one made: the next adds none, unless that
            # sum still waits, when it is dropped instead)
            if count > 1 and not _drop_sum(sums, edge):
                sums.credits[edge] = sums.credits.get(edge, 0) + 1
    if not held:
        sums.view_parents.clear()
    if sums.deferred:
        release(sums)
    return standing


def _pending(sums: HeldSums) -> set[Any]:
    """The keys in ``uses`` of the edges of the held views not yet reached or taken back."""
    return {key for found in sums.held_views.values() for key in found.keys}


def defer(sums: HeldSums, key: Any, entry: Deferred) -> bool:
    """An edge to ``key`` adds sums (``entry``): while a held view's edge to the same tensor
    may be taken back, they wait (one is dropped with it, see :func:`written_views`);
    whether they do."""
    if key not in _pending(sums):
        return False
    sums.deferred.setdefault(key, []).append(entry)
    return True


def _drop_sum(sums: HeldSums, key: Any) -> bool:
    """A held view's edge to ``key`` is taken back: one sum waiting there (the latest) is
    not counted; whether one waited."""
    waiting = sums.deferred.get(key)
    if not waiting:
        return False
    adds, edge, context = waiting.pop()
    if adds > 1:
        waiting.append((adds - 1, edge, context))
    elif not waiting:
        del sums.deferred[key]
    return True


def release(sums: HeldSums, everything: bool = False) -> None:
    """Count the sums that wait where no held view's edge to their tensor may be taken
    back now (``everything``: all of them, none may be)."""
    if everything:  # (the views still held are results: their own backward counts)
        for found in sums.held_views.values():
            _count_backs(sums, found)
    pending = set() if everything else _pending(sums)
    now = sums.where() if sums.where is not None else None
    for key in [key for key in sums.deferred if key not in pending]:
        for adds, edge, _ in sums.deferred.pop(key):
            sums.hand_sum(adds, edge, now)
