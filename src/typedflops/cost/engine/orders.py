"""Checks of a formula where its sizes compare otherwise than at the call's own sizes.

The fits change each size alone and the far checks change the call's dims together, in
proportion: neither makes two sizes equal that were not, nor turns which is larger. A body
that branches on how two sizes compare (``if self.d_in == self.d_out: y = y + x``, a
projection shortcut only where widths differ, ``if self.n_heads > self.n_kv_heads:``,
``if x.shape[0] == x.shape[1]:``) runs other ops there, and a formula fitted at unequal sizes
is wrong at equal ones. Two more runs check every pair at once: all the sizes at one value
(the smallest of them, so that no tensor grows), and the sizes in the reverse order of their
values (the largest takes the smallest's value, and so on: every pair turned). Where the body
refuses such a run (a module that needs ``n_embd % n_head == 0`` in another form, a size
capped by another), each pair is run alone instead, up to :data:`_MOST_PAIRED` sizes.

Equal sizes can make a size the body derives from them 1 (``d_model == n_heads`` gives heads
of width 1), where torch lowers ops to others (a product over one element to a multiply).
Such a size flows through the ops both runs share (the views splitting heads): a run where
an op the call's own run has too takes a tensor with an axis of 1 where that op never did
refutes nothing (a branch on such an equality is not told from torch's own path there). Ops
only the check runs, such as a branch's own (a residual's ``sum(-1, keepdim=True)``), do not
count for it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

from ..types import Term
from .axes import Axis
from .events import Event
from .fit import Size, size_value
from .runs import Counted, Run, Runner
from .tensors import flat_tensors

__all__ = ["axes_at_one", "order_checked"]

#: Beyond this many sizes, pairs are not run one by one when a run of all of them is refused.
_MOST_PAIRED = 6

Mark = Callable[[Run | Counted | None, dict[str, Term], Mapping[str, int]], None]


def order_checked(
    runner: Runner,
    at: Mapping[str, Size],
    axes: Sequence[Axis],
    terms: dict[str, Term],
    values: Mapping[str, int],
    mark: Mark,
) -> dict[str, Term]:
    """The terms, those that a run with sizes made equal or turned in order refutes marked
    inexact (by ``mark``, with the run and the values of the formulas' symbols there)."""
    sized = [axis for axis in axes if isinstance(at[axis.keys[0]], int)]
    own = {axis.name: size_value(at[axis.keys[0]]) for axis in sized}
    # (a size of 1 is checked where it is 1: see .at_one)
    sized = [axis for axis in sized if own[axis.name] > 1]
    if len({own[axis.name] for axis in sized}) < 2:
        return terms  # all equal already: the fits changed each alone
    if not any(term.exact for term in terms.values()):
        return terms

    base = runner.run(dict(at))
    if base is None:
        return terms
    shared = {event.op for event in base.events}
    ones = axes_at_one(base.events, shared)

    def check(assigned: Mapping[str, int], group: Sequence[Axis]) -> bool:
        change: dict[str, Size] = {}
        for axis in group:
            change.update(axis.assign(assigned[axis.name]))
        run = runner.run({**at, **change})
        if run is not None and axes_at_one(run.events, shared) <= ones:
            mark(run, terms, {**values, **{axis.name: assigned[axis.name] for axis in group}})
        return run is not None

    for arrange in (_equal, _turned):
        if check(arrange(sized, own), sized) or len(sized) > _MOST_PAIRED:
            continue
        for pair in itertools.combinations(sized, 2):
            if own[pair[0].name] != own[pair[1].name]:
                check(arrange(pair, own), pair)
    return terms


def _equal(group: Sequence[Axis], own: Mapping[str, int]) -> dict[str, int]:
    """Every size of ``group`` at the smallest of their values."""
    smallest = min(own[axis.name] for axis in group)
    return {axis.name: smallest for axis in group}


def _turned(group: Sequence[Axis], own: Mapping[str, int]) -> dict[str, int]:
    """The sizes of ``group`` in the reverse order of their values: the i-th smallest takes
    the i-th largest value (equal sizes stay equal)."""
    ranked = sorted({own[axis.name] for axis in group})
    return {axis.name: ranked[-1 - ranked.index(own[axis.name])] for axis in group}


def axes_at_one(
    events: Sequence[Event], ops: set[str]
) -> set[tuple[str, int, int, tuple[int, ...]]]:
    """Where the ops of a run named in ``ops`` take a tensor with an axis of 1: (op,
    argument, rank, the axes of 1)."""
    found: set[tuple[str, int, int, tuple[int, ...]]] = set()
    for event in events:
        if event.op not in ops:
            continue
        for index, tensor in enumerate(flat_tensors(event.args)):
            axes = tuple(i for i, size in enumerate(tensor.shape) if size == 1)
            if axes:
                found.add((event.op, index, len(tensor.shape), axes))
    return found
