"""Copies autograd makes of a tensor whose op's edges wait: read by no op of the forward,
they tell whether the tensor is a result a backward may start from.

Autograd detaches each output it saves for backward (a copy never read in the forward): an
op reading such a copy reads the tensor off the graph (it is ``observed``), and the tensor,
let go while a copy lives, is decided once the copy is read or gone. An in-place op whose
backward needs the old values of the tensor it writes (``x.mul_(y)`` with ``y`` needing
grad) has autograd ``clone`` it first: that copy is saved and read by no op, no gradient
reaches it.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Protocol

import torch

from .waits import TRIM, WaitingOutput, quiet

__all__ = ["copy_gone", "note_copies", "read_copy", "saved_copy"]


class CopySums(Protocol):
    """What of :class:`.fan_in.GradientSums` a copy reads and changes."""

    waiting: dict[int, WaitingOutput]
    detached: dict[int, tuple[weakref.ref[torch.Tensor], WaitingOutput]]
    _copies_limit: int

    def _check_pass(self) -> None: ...
    def _decide(self, output: WaitingOutput, boundary: bool = False) -> None: ...


def note_copies(sums: CopySums, tensor: torch.Tensor, outputs: list[torch.Tensor]) -> None:
    """``outputs`` are detached copies of ``tensor``: while one lives, ``tensor`` let go
    waits for it to be read (off the graph) or gone."""
    found = sums.waiting.get(id(tensor))
    if found is None or found.ref() is not tensor:
        return
    for output in outputs:
        found.copies += 1
        ref = weakref.ref(output, functools.partial(copy_gone, sums, found))
        sums.detached[id(output)] = (ref, found)
    if len(sums.detached) > sums._copies_limit:
        sums.detached = {k: v for k, v in sums.detached.items() if v[0]() is not None}
        sums._copies_limit = max(TRIM, 2 * len(sums.detached))


def read_copy(sums: CopySums, tensor: torch.Tensor) -> None:
    """An op reads ``tensor``: if it is a detached copy, what it copies is read aside."""
    found = sums.detached.get(id(tensor))
    if found is not None and found[0]() is tensor and not quiet.on:
        found[1].observed = True
        if found[1].let_go:
            sums._decide(found[1])


def copy_gone(sums: CopySums, output: WaitingOutput, _: object = None) -> None:
    """A detached copy of ``output``'s tensor is gone: if it was the last and the tensor is
    let go, the tensor is decided."""
    sums._check_pass()
    output.copies -= 1
    if output.let_go and output.copies <= 0:
        sums._decide(output)


def saved_copy(sums: CopySums, clone: tuple[torch.Tensor, Any]) -> None:
    """``clone`` (a tensor and the id of the op's output) is autograd's saved copy of a
    tensor an in-place op writes: unless an op differentiates it, it is off the graph."""
    found = sums.waiting.get(clone[1])
    if found is not None and (copy := found.ref()) is not None and copy is not clone[0]:
        found.off = found.saved = True
