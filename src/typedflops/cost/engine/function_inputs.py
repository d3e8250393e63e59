"""The edges of a ``torch.autograd.Function``'s own inputs (see :mod:`.fan_in`).

A Function's forward runs with autograd off, and autograd makes its outputs a node of their
own once it returns: seen op by op, what the Function reads is read off the graph, so the op
that made it would reach no backward (a layer before a Function, or before a module with a
full backward hook, whose inputs and outputs pass through one, predicted no backward). So
the ops run inside a Function's ``apply`` (its forward, and the views autograd makes of the
inputs it returns as they are) are taken together as one op: its edges go to the
Function's inputs needing grad, counted once it reaches backward, and each tensor they make
may be one of its outputs, through which it does (read by an op that reaches backward, or
held as a result). While the Function runs it is kept from being decided dead by the
temporaries of its forward; the first op after it lets it go.
"""

from __future__ import annotations

import functools
import weakref
from types import FrameType
from typing import Any

import torch

from ...contract.walk import tensors_in
from .custom_ops import generated_for_custom_op
from .events import Event
from .outputs_reached import read_one
from .stack import frame_of
from .tensors import differentiable
from .waits import Waiting, WaitingOutput

__all__ = ["FunctionCall", "function_op"]

_forward_ad = torch._C._is_fwd_grad_enabled
_APPLY = torch.autograd.function.Function.apply.__func__.__code__  # type: ignore[attr-defined]
# How far up the stack an op run inside a Function's forward finds its ``apply`` (its
# forward's helpers included).
_DEPTH = 48


class FunctionCall:
    """One call of a Function's ``apply`` that took inputs needing grad: its frame (by id,
    with the ids of its inputs, held weakly, to tell a later call apart) and its op's
    :class:`.waits.Waiting` in the gradient sums."""

    __slots__ = ("frame", "inputs", "waiting")

    def __init__(self, frame: int, inputs: list[torch.Tensor], waiting: Waiting) -> None:
        self.frame = frame
        self.inputs = [weakref.ref(tensor) for tensor in inputs]
        self.waiting = waiting

    def same(self, frame: FrameType, inputs: list[torch.Tensor]) -> bool:
        return (
            id(frame) == self.frame
            and len(inputs) == len(self.inputs)
            and all(ref() is tensor for ref, tensor in zip(self.inputs, inputs, strict=True))
        )


def _apply_frame() -> FrameType | None:
    """The frame of the innermost ``Function.apply`` running, if any is near. A Function's
    ``apply`` runs its forward (and makes the views of the inputs it returns) with forward
    AD off as well as autograd, which ``torch.no_grad()`` leaves on: with it on, no
    Function's forward runs here, and the stack is not looked at."""
    if _forward_ad():
        return None
    return frame_of(_APPLY, _DEPTH, 3)


def _inputs(frame: FrameType) -> list[torch.Tensor]:
    cls = frame.f_locals.get("cls")
    if isinstance(cls, type) and generated_for_custom_op(cls):
        return []  # (a torch.library custom op's: its replay counts its edges)
    args = frame.f_locals.get("args", ())
    return [t for t in tensors_in(args) if t.requires_grad and differentiable(t)]


def function_op(
    sums: Any,
    call: FunctionCall | None,
    event: Event,
    args: tuple[Any, ...],
    kwargs: Any,
    out: Any,
) -> tuple[FunctionCall | None, bool]:
    """An op ran with autograd off, or after one that ran inside a Function (``sums``: the
    run's :class:`.fan_in.GradientSums`, ``call``: the Function running at the last such
    op): the Function running now, and whether the op ran inside one (its reads and
    outputs are then the Function's, taken here)."""
    frame = None if event.needs_grad or torch.is_grad_enabled() else _apply_frame()
    if frame is None:
        end(sums, call)
        return None, False
    inputs = _inputs(frame)
    if call is None or not call.same(frame, inputs):
        end(sums, call)
        call = _begin(sums, frame, inputs)
        if call is None:
            return None, False
    sums.read(args, kwargs)
    waiting = call.waiting
    for tensor in tensors_in(out, depth=2):
        if not differentiable(tensor):
            continue
        key = id(tensor)
        found = sums.waiting.get(key)
        if found is not None and found.ref() is tensor:
            continue  # (written in place: its op's own, or already the Function's)
        ref = weakref.ref(tensor, functools.partial(sums._let_go, key))
        sums.waiting[key] = WaitingOutput(ref, waiting, 0)
        waiting.left += 1
        waiting.alive += 1
    return call, True


def _begin(sums: Any, frame: FrameType, inputs: list[torch.Tensor]) -> FunctionCall | None:
    """A Function's first op: its edges to ``inputs``, waiting on what they were made by,
    with one output held for it while it runs (see :func:`end`)."""
    if not inputs:
        return None
    sums._check_pass()
    context = sums.where() if sums.where is not None else None
    waiting = Waiting([sums._input(tensor) for tensor in inputs], 1, None, None, context)
    waiting.alive = 0  # (its outputs are counted as its ops make them)
    for tensor in inputs:
        source = sums.waiting.get(id(tensor))
        if source is None or source.ref() is not tensor or source.done:
            continue
        for dropped in read_one(source.waiting):
            sums._decide(dropped)
        source.readers += 1
        source.off = True
        waiting.sources.append(source)
    if not (sums.inside() or sums.internal()):
        sums._live(waiting)  # (a record's own code: a reader is taken as reaching backward)
    return FunctionCall(id(frame), inputs, waiting)


def end(sums: Any, call: FunctionCall | None) -> None:
    """The Function of ``call`` returned: it reaches backward only through its outputs."""
    if call is None:
        return
    if call.waiting.inputs is not None:
        sums._dead(WaitingOutput(_NONE, call.waiting, 0))  # (the one held for it)


def _none() -> None:
    return None


_NONE: Any = _none
