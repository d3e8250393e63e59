"""Which outputs of an op with several a gradient reaches, and the outputs its backward
replay differentiates.

Autograd runs an op's backward once, with a gradient for each output that one reaches
and none (an undefined tensor) for the others; a formula skips the terms of those
(``var_mean_backward`` without the variance's gradient is the mean's alone: 20 FLOPs
for a 4 x 5 input, not 68; ``svd_backward`` with only ``S``'s is one product, not the
terms of ``U`` and ``V``). So the replay of :mod:`.backward` differentiates the outputs
that :mod:`.fan_in` finds reached: read by an op that reaches backward, or held as a
result. The op's event says which (:attr:`.events.Event.reached`, part of the replay's
cache key); an op whose every output is reached keeps None, as a one-output op does. A
record's event is shared by every call of the op alike: the call's items get a copy,
one per op event and outputs reached.

In a record's own code an output let go unread may be a loss a backward starts from
(:mod:`.fan_in`); of an op with several, one let go while another is held is not
(``torch.var_mean(x, 1)[1]``: the variance is dead), unless every output is let go before
any is read (``torch.var_mean(x, 1)`` dropped whole): each is then a result, as each is
of a function returning the tuple.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from ...contract.walk import tensors_in
from .edges import flows_of
from .events import Event
from .tensors import differentiable
from .waits import EdgeInput, Waiting, WaitingOutput

__all__ = ["died", "differentiated", "dropped_unread", "flowing", "kept", "reach", "read_one"]

#: A record's copies of a shared op event with the outputs a gradient reaches, by both.
_COPIES: dict[tuple[Event, tuple[int, ...]], Event] = {}


def reach(output: WaitingOutput) -> None:
    """A gradient reaches ``output`` (decided once): where its op has several, its event
    says which once each is decided."""
    waiting = output.waiting
    if waiting.count < 2 or output.inert:
        return
    if waiting.reached is None:
        waiting.reached = set()
    waiting.reached.add(output.index)
    _decided(waiting)


def dropped_unread(output: WaitingOutput) -> list[WaitingOutput]:
    """An output of an op with several let go in a record's own code, no output of the op
    read yet: those to decide now. While another is held, none: it waits in the op's
    ``dropped`` (off; decided once one is read, or at settle); the last one let go: it,
    and those waiting if the same instruction let them go (the tuple dropped whole), each
    a result."""
    waiting = output.waiting
    site = _site()
    if waiting.alive > 0:
        if waiting.dropped is None:
            waiting.dropped = []
        waiting.dropped.append((site, output))
        return []
    found, waiting.dropped = waiting.dropped or [], None
    together = [each for at, each in found if at == site]
    for each in together:
        each.off = False
    return [output, *together, *(each for at, each in found if at != site)]


def _site() -> tuple[int, int, int]:
    """The instruction of the user's code that let a tensor go (its weak reference's
    callback runs inside it: three frames up, past :mod:`.fan_in`'s and this one's; none
    in a thread of autograd's engine, which runs no Python code of its own)."""
    try:
        frame = sys._getframe(3)
    except ValueError:
        return 0, 0, 0
    return id(frame.f_code), id(frame), frame.f_lasti


def read_one(waiting: Waiting) -> list[WaitingOutput]:
    """An op read an output of ``waiting``'s op: those let go before, to decide now (off)."""
    waiting.read = True
    found, waiting.dropped = waiting.dropped or [], None
    return [output for _, output in found if not output.done]


def died(output: WaitingOutput) -> bool:
    """No gradient reaches ``output`` (decided once); whether it was the last of its op
    to be decided."""
    if output.waiting.count >= 2 and not output.inert:
        return _decided(output.waiting)
    return False


def _decided(waiting: Waiting) -> bool:
    # (once for the op, when its last output a gradient may flow through is decided: an
    # op with many, `x.unbind(0)` read one by one, is not shown again for each)
    waiting.open -= 1
    if waiting.open > 0:
        return False
    if waiting.reached and waiting.event is not None:
        _show(waiting, tuple(sorted(waiting.reached)))
    return True


def kept(
    waiting: Waiting,
) -> tuple[list[EdgeInput], list[WaitingOutput], list[WaitingOutput]]:
    """The edges of an op whose outputs send gradients to different inputs that those
    reached send, the outputs it read that they differentiate, and those it read that
    they do not (no longer read by it)."""
    split, inputs = waiting.split, waiting.inputs
    assert split is not None and inputs is not None
    allowed: set[int] = set()
    for index in waiting.reached or ():
        allowed.update(split.edges.get(index, ()))
    edges = [edge for edge, at in zip(inputs, split.at, strict=True) if at is None or at in allowed]
    sources: list[WaitingOutput] = []
    dropped: list[WaitingOutput] = []
    for source, at in zip(waiting.sources, split.source_at, strict=True):
        (sources if at in allowed else dropped).append(source)
    return edges, sources, dropped


def _show(waiting: Waiting, reached: tuple[int, ...]) -> None:
    event = waiting.event
    assert event is not None
    flows = flows_of(event)
    every = len(reached) >= waiting.count or (flows is not None and set(flows) <= set(reached))
    if waiting.places is None:  # (a dry run's own event)
        event.reached = None if every else reached
        return
    shown = event if every else _copy(event, reached)
    before, waiting.shown = waiting.shown, shown
    for items, index in waiting.places:
        if index < len(items) and items[index] is before:
            items[index] = shown


def _copy(event: Event, reached: tuple[int, ...]) -> Event:
    key = (event, reached)
    found = _COPIES.get(key)
    if found is None:
        if len(_COPIES) > 4096:
            _COPIES.clear()
        found = object.__new__(Event)
        found.__dict__.update(event.__dict__)
        found.reached = reached
        _COPIES[key] = found
    return found


def differentiated(out: Any, reached: tuple[int, ...] | None) -> list[torch.Tensor]:
    """The outputs of an op replayed (``out``) that its backward is taken for: those at
    ``reached`` among its floating-point outputs (None: every one), each if a gradient
    flows through it (a real determinant's sign, a layer norm's saved mean do not)."""
    outputs = _outputs(out)
    if reached is not None:
        outputs = [outputs[index] for index in reached if index < len(outputs)]
    return [t for t in outputs if _flows(t)]


def flowing(out: Any) -> tuple[int, ...]:
    """The positions among the floating-point outputs of an op replayed (``out``) of those
    a gradient flows through."""
    return tuple(index for index, tensor in enumerate(_outputs(out)) if _flows(tensor))


def _outputs(out: Any) -> list[torch.Tensor]:
    """An op's floating-point outputs, in the order :mod:`.fan_in` numbers them."""
    if isinstance(out, torch.Tensor):
        return [out] if differentiable(out) else []
    return [t for t in tensors_in(out, depth=2) if differentiable(t)]


def _flows(tensor: torch.Tensor) -> bool:
    return tensor.requires_grad and tensor.grad_fn is not None
