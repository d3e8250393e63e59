"""Saved tensors that a backward building a graph reads again (``create_graph=True``: a
gradient penalty, forces trained with the energy, a Hessian-vector product).

Autograd unpacks each saved tensor as a new Python tensor on the saved one's node: an
edge to it is an edge to the saved tensor, whose gradients the engine sums with those of
the forward's edges (a weight read by the forward's product and, through its saved
transpose, by the penalty's: one add of the weight's size). So an unpacked tensor's edges
count as the saved tensor's (:func:`alias`), and once such an edge reaches backward, the
ops that made the saved tensor do too, though the forward alone had left them off the
graph (a critic's activations, read only by the penalty's graph: :func:`reread`).
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

import torch

from .outputs_reached import reach
from .waits import EdgeInput, Waiting, WaitingOutput

__all__ = ["SavedReads", "alias", "lose", "note_saved", "reread"]


class SavedReads:
    """What a run's gradient sums keep of the saved tensors a backward building a graph
    reads: the unpacked tensors and the saved ones they are (``aliases``, by weak
    reference), the saved tensors whose counts outlive them (``kept``: a dry run's), the
    ops that made them (``saved``), those read again (``reread``) and the ops found to
    reach no backward while one may (``lost``, by the id of their :class:`Waiting`)."""

    __slots__ = ("aliases", "kept", "lost", "reread", "saved")

    def __init__(self) -> None:
        self.aliases: dict[weakref.ref[torch.Tensor], weakref.ref[torch.Tensor]] = {}
        self.kept: set[weakref.ref[torch.Tensor]] = set()
        self.saved: dict[weakref.ref[torch.Tensor], WaitingOutput] = {}
        self.reread: set[weakref.ref[torch.Tensor]] = set()
        self.lost: dict[int, tuple[Waiting, list[EdgeInput], list[WaitingOutput]]] = {}

    def ref(self, tensor: torch.Tensor) -> weakref.ref[torch.Tensor]:
        """The weak reference ``tensor``'s edges are counted by: the saved tensor's, if
        it is one unpacked."""
        ref = weakref.ref(tensor)
        return self.aliases.get(ref, ref) if self.aliases else ref

    def clear(self) -> None:
        """A backward ran in a record: the next forward's graph is another."""
        self.aliases.clear()
        self.saved.clear()
        self.reread.clear()
        self.lost.clear()

    def prune(self) -> set[weakref.ref[torch.Tensor]]:
        """Let go of the aliases of tensors gone; the tensors whose counts are kept."""
        self.aliases = {ref: to for ref, to in self.aliases.items() if ref() is not None}
        return self.kept


class ReadSums(Protocol):
    """What of :class:`.fan_in.GradientSums` a saved tensor read again reads and changes."""

    waiting: dict[int, WaitingOutput]
    reads: SavedReads

    def _add(self, edge: EdgeInput, edges: int, context: Any = None) -> None: ...
    def _live(self, waiting: Waiting) -> None: ...


def note_saved(sums: ReadSums, tensor: torch.Tensor, ref: weakref.ref[torch.Tensor]) -> None:
    """Autograd saved ``tensor`` (``ref``: its weak reference): the op that made it is
    kept, for a backward that reads it again."""
    found = sums.waiting.get(id(tensor))
    if found is not None and found.ref() is tensor:
        sums.reads.saved[ref] = found


def alias(sums: ReadSums, tensor: torch.Tensor, original: weakref.ref[torch.Tensor]) -> None:
    """``tensor`` is the saved tensor ``original`` refers to (perhaps let go), unpacked:
    its edges are that tensor's."""
    reads = sums.reads
    reads.aliases[weakref.ref(tensor)] = original
    if original in reads.saved:
        reads.reread.add(original)


def lose(reads: SavedReads, waiting: Waiting, inputs: list[EdgeInput]) -> None:
    """An op found to reach no backward (its ``inputs``' edges dropped), kept while a
    saved tensor may yet be read again: a backward building a graph may reach it."""
    reads.lost[id(waiting)] = (waiting, inputs, list(waiting.sources))


def reread(sums: ReadSums, ref: weakref.ref[torch.Tensor]) -> None:
    """An edge to the saved tensor of ``ref``, read again by a backward building a graph,
    reaches backward: so do the op that made it and those that made what it read, each
    once (an op left off the graph gets its backward and its edges back)."""
    reads = sums.reads
    reads.reread.discard(ref)
    stack = [reads.saved.pop(ref)]
    while stack:
        output = stack.pop()
        waiting = output.waiting
        if not output.done:  # (not decided yet: reached now)
            output.done = True
            reach(output)
            sums._live(waiting)
            continue
        found = reads.lost.pop(id(waiting), None)
        if found is None:  # (reached already)
            continue
        _, inputs, sources = found
        event = waiting.event
        if event is not None and waiting.places is None:  # (a dry run's own event)
            event.needs_grad = True
        for edge in inputs:
            sums._add(edge, 1, waiting.context)
        stack.extend(sources)
