"""The node an in-place op gives the tensor it writes, waiting as an op's output does.

An op that writes a tensor in place (``h.sigmoid_()``, ``h.add_(x)``) gives it a new
history: autograd's graph reaches the op through the tensor as it is now, and through
nothing else. So the op reaches backward as an out-of-place op does (see
:class:`.fan_in.GradientSums`): once the tensor, written, is read by an op that reaches
backward or held as a result. Its edges wait until then; if nothing reaches it (torch's CPU
LSTM cell writes the last step's output gate with ``sigmoid_``, and that gate feeds only
``h_n``: where only ``c_n`` is used, its ``sigmoid_backward`` never runs), it costs no
backward. The node its tensor had before is read by the op if the op differentiates it
(``sigmoid_``) and by nothing else from then on: it reaches backward only through its
readers so far.

A write through a view (``h[:, 0].mul_(2)``, slice assignment) gives the view's base the new
node (autograd's ``CopySlices``, with an edge to the base's old node): the base's readers
from then on, and the views of it read again (:func:`regenerate`), reach the op.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from .held_views import HeldSums, written_views
from .outputs_reached import reach
from .tensors import differentiable
from .waits import EdgeInput, Waiting, WaitingOutput, view_again

__all__ = ["rebased_views", "regenerate", "rewrite"]


class GradientSums(HeldSums, Protocol):
    """What of :class:`.fan_in.GradientSums` a write reads and changes."""

    waiting: dict[int, WaitingOutput]
    histories: dict[weakref.ref[torch.Tensor], int]
    made: dict[weakref.ref[torch.Tensor], int]
    where: Callable[[], Any] | None
    shared: bool

    def _input(self, tensor: torch.Tensor) -> EdgeInput: ...
    def _unread(self, view: torch.Tensor) -> bool: ...
    def _replaced(self, view: torch.Tensor) -> None: ...
    def _decide(self, output: WaitingOutput) -> None: ...
    def _live(self, waiting: Waiting) -> None: ...
    def _let_go(self, key: int, _: object = None) -> None: ...


def rewrite(
    sums: GradientSums,
    waiting: Waiting,
    output: torch.Tensor,
    chosen: Sequence[torch.Tensor],
    written: Sequence[torch.Tensor],
    bases: Sequence[torch.Tensor],
    lazy: bool,
) -> None:
    """``waiting``, an op that wrote ``output`` in place, is the node of the tensor that
    holds ``output``'s history now (``output``, or the base of a view written); its edges
    wait as an out-of-place op's do. ``chosen``: the inputs it differentiates (their nodes
    are read already); ``written``: the tensors it writes; ``bases``: the bases its
    ``CopySlices`` has an edge to (their old nodes are read by it); ``lazy``: whether a node
    read reaches backward only if its reader does (else, in a record's own code, at once)."""
    for base in bases:
        _read(sums, waiting, base, lazy)
    for view in written:
        # (a view no op read since its view op read the base: that op stands for the
        # base's edge, read by this one if it does not differentiate the view itself)
        if _of_base(view) and not any(view is t for t in chosen) and sums._unread(view):
            _read(sums, waiting, view, lazy)
    holder = output
    if any(output is t for t in written) and _of_base(output):
        holder = output._base  # type: ignore[assignment]
    key = id(holder)
    old = sums.waiting.get(key)
    if old is not None and old.ref() is holder and not old.done:
        # (its node so far starts no backward now: it reaches backward through its readers)
        del sums.waiting[key]
        if not old.inert:
            old.waiting.alive -= 1
        old.off = True
        sums._decide(old)
    held = weakref.ref(holder, functools.partial(sums._let_go, key))
    sums.waiting[key] = WaitingOutput(held, waiting)


def rebased_views(
    sums: GradientSums, written: Sequence[torch.Tensor]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The views among ``written`` whose base gets autograd's ``CopySlices`` edge from the
    op writing them, each with its base. Not one whose view op read the base itself and no
    op read yet: that op stands for the edge (so does a view held at a call's boundary, see
    :mod:`.held_views`). A view of another view (``h[:, 2:4][1:]``) no op read has its node
    replaced (it read nothing of the base directly), and the edge goes to the base."""
    standing = written_views(sums, written) if sums.held_views else []
    found = []
    for view in written:
        base = view._base
        if base is None or not base.requires_grad or any(view is v for v in standing):
            continue
        if sums._unread(view):
            inputs = sums.waiting[id(view)].waiting.inputs
            if inputs and len(inputs) == 1 and inputs[0][0]() is base:
                continue
            sums._replaced(view)
        found.append((view, base))
    return found


def regenerate(sums: GradientSums, tensors: list[torch.Tensor]) -> None:
    """Views among ``tensors`` whose base was written in place since their node was made:
    autograd makes such a view a new node (``AsStridedBackward`` of the base's
    ``CopySlices``) when it is next read, with one edge to the base as it is now, whose node
    it reads; its readers read that node (it waits as an op's output would), and the view's
    next edges go to it."""
    for tensor in tensors:
        base = tensor._base
        if base is None or not base.requires_grad:
            continue
        now = sums.histories.get(weakref.ref(base), 0)
        ref = weakref.ref(tensor)
        if sums.made.get(ref, 0) == now:
            continue
        sums.made[ref] = now
        sums.histories[ref] = sums.histories.get(ref, 0) + 1
        sums._replaced(tensor)
        context = sums.where() if sums.where is not None else None
        node = Waiting([sums._input(base)], 1, None, None, context)
        node.remade = True
        node.again = view_again(tuple(tensor.shape), tensor.stride(), tensor.dtype, sums.shared)
        _read(sums, node, base, True)
        key = id(tensor)
        held = weakref.ref(tensor, functools.partial(sums._let_go, key))
        sums.waiting[key] = WaitingOutput(held, node)


def _of_base(view: torch.Tensor) -> bool:
    """Whether ``view`` is a view whose base needs grad once a differentiated op writes it
    (a write through it is the base's). A base that needed no grad before (``out =
    x.new_zeros(...)``, then ``out[:2].copy_(y)``, as ``pad_packed_sequence`` fills its
    output) needs it from that write on: autograd gives it its ``CopySlices`` node when the
    op returns, after the kernel a dispatch mode sees."""
    base = view._base
    return base is not None and (base.requires_grad or differentiable(base))


def _read(sums: GradientSums, waiting: Waiting, tensor: torch.Tensor, lazy: bool) -> None:
    """``waiting`` reads the node of ``tensor`` as it is now, if that node's edges wait:
    it reaches backward if ``waiting`` does (``lazy``), or now."""
    source = sums.waiting.get(id(tensor))
    if source is None or source.ref() is not tensor or source.done:
        return
    if any(source is found for found in waiting.sources):
        return
    if lazy:
        source.readers += 1
        source.off = True
        waiting.sources.append(source)
    else:
        source.done = True
        reach(source)
        sums._live(source.waiting)
