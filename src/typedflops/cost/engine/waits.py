"""What the gradient sums of :mod:`.fan_in` hold while an op's edges wait: the edges
(:data:`EdgeInput`), the op (:class:`Waiting`) and each output no op has decided yet
(:class:`WaitingOutput`), the event a sum is counted as (:func:`gradient_sum`), and the
thread's notes of where a count starts afresh (a record's top-level call, a backward that
ran) and of reads that are not the user's.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from .events import Event, named_event
from .op_events import group_of

__all__ = [
    "PASSES",
    "TRIM",
    "EdgeInput",
    "Place",
    "Split",
    "Waiting",
    "WaitingOutput",
    "always",
    "backward_ran",
    "gradient_sum",
    "never",
    "new_call",
    "off_graph",
    "quiet",
    "reads_unseen",
    "scope",
    "sums_event",
    "view_again",
]

_NAME = "gradient sum"
_ADD = "add (gradient sum)"


def gradient_sum(size: int, dtype: torch.dtype, adds: int, source: int, shared: bool) -> Event:
    """The event of ``adds`` sums of gradients of ``size`` values of ``dtype``, with no
    forward FLOPs (``source``: the tensor's ``id``, for a repeated block's bookkeeping in
    :mod:`.calls`); ``shared``: a record's, in a group of its own (as shared op events are).
    A complex add is 2 FLOPs, one per part.
    """
    nbytes = size * dtype.itemsize
    group = group_of(_NAME, shared)
    add = Event(
        op=_ADD,
        func=None,
        group=group,
        args=(),
        kwargs=(),
        out=None,
        flops=adds * size * (2 if dtype.is_complex else 1),
        entry=None,
        counted=True,
        bytes_read=2 * adds * nbytes,
        bytes_written=adds * nbytes,
        view=False,
        needs_grad=False,
        torch_counted=False,
    )
    event = named_event(_NAME, 0)  # (no forward FLOPs; its backward is the adds)
    event.group = group
    event.needs_grad = True
    event.backward = [add]
    event.source = source
    return event


_AGAIN = "view made again"
_AGAIN_SUM = "sum (view made again)"


def view_again(
    sizes: tuple[int, ...], strides: tuple[int, ...], dtype: torch.dtype, shared: bool
) -> Event | None:
    """The event of the backward of a view autograd makes again after its base was written
    in place (``AsStridedBackward``), if it computes: torch's ``as_strided_backward``
    sums the gradient over each expanded dim of the view (stride 0, size over 1), the
    last first, a sum of what is left each (``x.expand(2, n)`` made again: 2·n). None for
    any other view (its gradient is copied into the base's)."""
    numel = 1
    for size in sizes:
        numel *= size
    flops = read = written = 0
    for size, stride in zip(reversed(sizes), reversed(strides), strict=True):
        if size > 1 and stride == 0:
            flops += numel
            read += numel
            numel //= size
            written += numel
    if not flops:
        return None
    key = (flops, read, written, dtype)
    if shared and (found := _AGAINS.get(key)) is not None:
        return found  # (a record's: one event for every view alike, as for sums)
    group = group_of(_AGAIN, shared)
    reduce = Event(
        op=_AGAIN_SUM,
        func=None,
        group=group,
        args=(),
        kwargs=(),
        out=None,
        flops=flops,
        entry=None,
        counted=True,
        bytes_read=read * dtype.itemsize,
        bytes_written=written * dtype.itemsize,
        view=False,
        needs_grad=False,
        torch_counted=False,
    )
    event = named_event(_AGAIN, 0)  # (no forward FLOPs; its backward is the sums)
    event.group = group
    event.needs_grad = True
    event.backward = [reduce]
    if shared:
        if len(_AGAINS) > 4096:
            _AGAINS.clear()
        _AGAINS[key] = event
    return event


def sums_event(size: int, dtype: torch.dtype, adds: int, source: int, shared: bool) -> Event:
    """The event of ``adds`` sums of a tensor's gradients (see :func:`gradient_sum`); a
    record's (``shared``) is one event for every sum alike, as for ops."""
    if not shared:
        return gradient_sum(size, dtype, adds, source, False)
    event = _SUMS.get((size, dtype, adds))
    if event is None:
        if len(_SUMS) > 4096:
            _SUMS.clear()
        event = _SUMS[size, dtype, adds] = gradient_sum(size, dtype, adds, 0, True)
    return event


#: A record's gradient sums, by size, dtype and number of adds.
_SUMS: dict[tuple[int, torch.dtype, int], Event] = {}


#: A record's events of views made again, by FLOPs, bytes and dtype.
_AGAINS: dict[tuple[int, int, int, torch.dtype], Event] = {}


# A tensor an edge goes to, held weakly (an op's output may wait long for its reader):
# the tensor, its id, whether it is a leaf, its size, its dtype, its history (how many
# times it was written in place before), and the record's top-level call the edge was made
# in (:func:`new_call`: a leaf's edges count afresh in each).
EdgeInput = tuple["weakref.ref[torch.Tensor]", int, bool, int, torch.dtype, int, int]


_SERIALS = itertools.count()


class _Scope(threading.local):
    serial = 0


scope = _Scope()


def new_call() -> None:
    """Note that a record's top-level call begins in this thread: the leaves it reads
    (parameters, inputs) start their edges afresh, as each call's own backward would."""
    scope.serial += 1


# Backward passes that ran in a record so far: a tensor's edges from before one were sent
# their gradients by it (a training loop's next forward starts its sums afresh).
PASSES = [0]


def backward_ran() -> None:
    """Note that autograd's engine ran a backward op in a record."""
    PASSES[0] += 1


# Where a record keeps an op's event: a call's items and its index there.
Place = tuple[list[Any], int]


class Waiting:
    """An op's edges, counted once the op is known to reach backward; ``event``, where
    ``places`` keep it (a record's), taken off backward if it is known not to. ``left``:
    its outputs not known dead; ``sources``: the waiting outputs it read. An op with
    several outputs also keeps ``count`` (its outputs), ``alive`` (those a gradient flows
    through not let go), ``open`` (those not decided yet), ``reached`` (those a gradient
    reaches, see :mod:`.outputs_reached`) and ``shown`` (the event its places hold now:
    ``event``, or a copy saying which outputs are reached); where its outputs send
    gradients to different inputs, ``split`` says which (its edges wait for its last
    output to be decided: ``wanted``, once one is reached). In a record's own code,
    ``dropped`` holds its outputs let go while another was held and none was read yet
    (``read``), each with the instruction that let it go: results if the last one is let
    go by the same (see :mod:`.outputs_reached`)."""

    __slots__ = (
        "again",
        "alive",
        "context",
        "count",
        "dropped",
        "event",
        "inputs",
        "left",
        "open",
        "places",
        "reached",
        "read",
        "remade",
        "serial",
        "shown",
        "sources",
        "split",
        "wanted",
    )

    def __init__(
        self,
        inputs: list[EdgeInput],
        left: int,
        event: Event | None,
        places: list[Place] | None,
        context: Any = None,
    ) -> None:
        self.inputs: list[EdgeInput] | None = inputs
        self.left = self.count = self.alive = self.open = left
        self.reached: set[int] | None = None
        self.split: Split | None = None
        self.wanted = False
        self.read = False
        self.dropped: list[tuple[Any, WaitingOutput]] | None = None
        self.shown = event
        self.event = event
        self.places = places
        # Where the op ran (a record's calls, in its thread or task): its sums go there.
        self.context = context
        self.sources: list[WaitingOutput] = []
        self.serial = next(_SERIALS)
        # A view made again: the event of its own backward, if it computes (see view_again).
        self.again: Event | None = None
        # Whether it is a view's node made again (one edge, to the view's base).
        self.remade = False


class Split:
    """The inputs each output of an op sends a gradient to (``edges``: by output, their
    positions among the inputs needing grad), where they differ; the position of each of
    the op's edges (``at``: None for a view's base) and of each output it read
    (``source_at``)."""

    __slots__ = ("at", "edges", "source_at")

    def __init__(
        self, edges: dict[int, tuple[int, ...]], at: list[int | None], source_at: list[int]
    ) -> None:
        self.edges = edges
        self.at = at
        self.source_at = source_at


class WaitingOutput:
    """An output of an op whose edges wait (``off``: no backward starts from it: an op
    differentiating it read it, or it was let go inside the function costed, or let go
    after only ops that send it no gradient read it; ``observed``: such an op read it (a
    statistic under ``no_grad``, ``.item()``, a comparison, a detached copy's reader, a
    saved-tensor hook): held where a call returns or the run ends, it is still a result;
    ``readers``: the waiting ops that differentiate it;
    ``copies``: its detached copies alive; ``let_go``: it is gone, its copies not;
    ``rootless``: decided to start no backward, it waits for its readers; ``saved``: a
    copy autograd saved; ``done``: decided; ``index``: its position among its op's
    floating-point outputs; ``inert``: one of several that no gradient flows through, a
    layer norm's saved mean: never a result a backward starts from; ``viewed``: a view's
    base and the base's history its node reads, noted when its readers are gone, to tell
    once the view is let go whether its base was written since)."""

    __slots__ = (
        "copies",
        "done",
        "index",
        "inert",
        "let_go",
        "observed",
        "off",
        "readers",
        "ref",
        "rootless",
        "saved",
        "viewed",
        "waiting",
    )

    def __init__(self, ref: weakref.ref[torch.Tensor], waiting: Waiting, index: int = 0) -> None:
        self.ref = ref
        self.waiting = waiting
        self.index = index
        self.inert = False
        self.off = False
        self.observed = False
        self.readers = 0
        self.copies = 0
        self.let_go = False
        self.rootless = False
        self.saved = False
        self.done = False
        self.viewed: tuple[weakref.ref[torch.Tensor], int] | None = None


class _Quiet(threading.local):
    on = False


quiet = _Quiet()


@contextlib.contextmanager
def reads_unseen() -> Iterator[None]:
    """Reads inside the block are not off-graph reads (a saved-tensor hook's ``detach``)."""
    before, quiet.on = quiet.on, True
    try:
        yield
    finally:
        quiet.on = before


def off_graph(waiting: Waiting) -> None:
    """An op read only off the graph: no backward of it runs. A record's event is shared
    by every call of the op alike: the call's items get a copy without backward."""
    event = waiting.event
    if event is None:
        return
    if waiting.places is None:  # (a dry run's own event)
        event.needs_grad = False
        return
    copy = object.__new__(Event)
    copy.__dict__.update(event.__dict__)
    copy.needs_grad = False
    for items, index in waiting.places:
        if index < len(items) and items[index] is event:
            items[index] = copy


#: The least size past which the gradient sums' tables of tensors (uses, detached copies,
#: outputs let go) are trimmed to the entries still needed; then twice what a trim keeps.
TRIM = 4096


def always() -> bool:
    """True (a question whose answer is always yes)."""
    return True


def never() -> bool:
    """False (a question whose answer is always no)."""
    return False
