"""A record's per-op rows after a backward ran inside it: each row's backward as it ran.

Without a backward pass, a row's ``backward`` is the one foreseen from its ops' shapes
(see :mod:`.backward`). Once autograd's engine ran inside the record, the total's backward
is what ran (see :mod:`.backward_ran`), which may differ from what was foreseen: a kernel
whose work values decide (a target equal to ``ignore_index``, an id equal to
``padding_idx``, a margin met or not: :mod:`.skipped_work`), a backward over some inputs
only (``torch.autograd.grad(y, x)``), a ``torch.autograd.Function``'s own backward. Then
each row's backward is the ops that ran that its foreseen backward names: a ran op is
traced to a row whose foreseen backward holds an op of the same name on the same shapes,
dtypes and arguments (values aside), in the rows' order, as many times as foreseen. A ran
op traced to no row (a sum of gradients, a hook's op, an op no foreseen backward has)
counts in a row of its own, :data:`UNTRACED`, so that the rows' backward sums to the
total's. Rows alike in every traced field that ran with different values (two calls of
one shape, different targets ignored) may take each other's counts: their sum holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..types import OpCost, Term
from .backward import backward_of
from .backward_ran import BackwardRan
from .events import Event
from .tensors import TensorMeta

__all__ = ["UNTRACED", "rows_as_ran"]

#: The name of the row of backward ops that ran and no row's foreseen backward names.
UNTRACED = "(backward not traced to a row)"

#: A row: its op cost, the forward events it ran (one call) and how many calls.
RowOps = tuple[OpCost, tuple[Event, ...], int]


class _Held:
    """A backward op that ran and how many of its runs no row has taken yet."""

    __slots__ = ("event", "times")

    def __init__(self, event: Event, times: int) -> None:
        self.event = event
        self.times = times


def rows_as_ran(rows: Iterable[RowOps], ran: BackwardRan) -> tuple[OpCost, ...]:
    """``rows`` with each one's backward the ops of ``ran`` traced to it (see the module),
    and a row :data:`UNTRACED` for the ran ops traced to none."""
    held = [_Held(event, times) for event, times in ran.backward.items()]
    listed = list(rows)
    foreseen = [
        [step for event in events if event.needs_grad for step in backward_of(event).events]
        for _, events, _ in listed
    ]
    backward = [0] * len(listed)
    wanted = [[times] * len(steps) for (_, _, times), steps in zip(listed, foreseen, strict=True)]
    # by the op's name and arguments, then by its name alone (an output whose size the
    # values set, such as embedding_bag's, is another size on meta), as often as foreseen
    for key in (_trace_key, _name):
        pool: dict[Any, list[_Held]] = {}
        for entry in held:
            if entry.times:
                pool.setdefault(key(entry.event), []).append(entry)
        for at, steps in enumerate(foreseen):
            for i, step in enumerate(steps):
                flops, taken = _take(pool.get(key(step)), wanted[at][i])
                backward[at] += flops
                wanted[at][i] -= taken
    # more passes than foreseen (``backward(retain_graph=True)`` run again): the first row
    # whose foreseen backward holds the same op on the same arguments
    first: dict[Any, int] = {}
    for at, steps in enumerate(foreseen):
        for step in steps:
            first.setdefault(_trace_key(step), at)
    for entry in held:
        at = first.get(_trace_key(entry.event), -1)
        if entry.times and at >= 0:
            backward[at] += entry.event.flops * entry.times
            entry.times = 0
    found = [
        _with_backward(cost, flops) for (cost, _, _), flops in zip(listed, backward, strict=True)
    ]
    left = [entry for entry in held if entry.times]
    if left:
        zero = Term.of_count(0)
        found.append(
            OpCost(
                op=UNTRACED,
                pattern=None,
                forward=zero,
                backward=Term.of_count(sum(entry.event.flops * entry.times for entry in left)),
                bytes_read=0,
                bytes_written=0,
            )
        )
    return tuple(found)


def _take(held: list[_Held] | None, times: int) -> tuple[int, int]:
    """FLOPs of up to ``times`` runs of the ran ops ``held`` (one key's), taken from them,
    and how many were taken."""
    flops = taken = 0
    for entry in held or ():
        if taken == times:
            break
        now = min(entry.times, times - taken)
        flops += entry.event.flops * now
        taken += now
        entry.times -= now
    return flops, taken


def _with_backward(cost: OpCost, backward: int) -> OpCost:
    if backward == cost.backward_flops:
        return cost
    return OpCost(
        op=cost.op,
        pattern=cost.pattern,
        forward=cost.forward,
        backward=Term.of_count(backward),
        bytes_read=cost.bytes_read,
        bytes_written=cost.bytes_written,
        view=cost.view,
        path=cost.path,
    )


def _trace_key(event: Event) -> Any:
    """An op's name and arguments, a tensor by its shape and dtype (not its device: a
    foreseen backward ran on meta), so that a ran op finds its foreseen self."""
    return (event.op, _plain(event.args), _plain(event.kwargs))


def _name(event: Event) -> Any:
    """An op's name, what it stands for aside (a foreseen ``add (gradient sum)`` runs as
    ``add``)."""
    return event.op.split(" (", 1)[0]


def _plain(value: Any) -> Any:
    if isinstance(value, TensorMeta):
        return ("tensor", value.shape, value.dtype)
    if isinstance(value, (tuple, list)):
        return tuple(_plain(item) for item in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value
