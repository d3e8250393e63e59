"""The backward passes that ran inside a record, counted as they ran.

A record predicts each forward op's backward (see :mod:`.backward`): what one backward pass
over it costs, whether or not one runs. When autograd's engine runs inside the block
(``loss.backward()``, ``torch.autograd.grad``, ``torch.func.grad``), its ops are seen too
(the current autograd node is set while they run) and counted here, each time they run: a
``backward(retain_graph=True)`` run twice counts both passes, a gradient of a gradient
(``create_graph=True``, then a backward through it) the second pass too, a backward over
some leaves only (``inputs=``, ``torch.autograd.grad(y, x)``) the products it ran, a hook
its ops, and a ``torch.utils.checkpoint`` region's forward run again the ops torch ran
before it stopped (``early_stop``). As in the prediction, the ops a
``torch.autograd.Function``'s backward runs to differentiate them (reentrant checkpointing)
are a forward run again: known once autograd's engine runs inside that backward (a graph
task begun while the Function's node runs). Those that build a graph for a backward
through the backward (``create_graph=True``: a gradient of a gradient), which no engine
differentiates while the node runs, are its backward.

Then a record's total ``backward_flops`` and ``recompute_flops`` are these counts, as
FlopCounterMode around the same block counts them; a row keeps its call's predicted backward
(the cost of the call), and a total term whose count is not the prediction is that count,
marked not exact. The total's per-op breakdown takes what ran, op by op (see
:mod:`.ran_rows`).

Counted, as predicted (see :mod:`.fan_in`): the engine's sums of a tensor's gradients from
several ops. Not counted: the adds of gradient accumulation into ``.grad``
(``AccumulateGrad``: the optimizer's side of a step, as in the prediction). The hooks of a
leaf run in that node too (``w.register_hook``, ``register_post_accumulate_grad_hook``: an
optimizer stepped in backward): the ops their Python code runs are counted, told apart from
the engine's own by the frames between the op and the engine's caller.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..types import Cost, Term
from .body_backward import ACCUMULATE, FUNCTION_NODE, UNDECIDED, run_by_hook
from .events import Event, named_event
from .opkeys import find_event, op_key, plan_of
from .saved import in_checkpoint, recomputing
from .skipped_work import BACKWARD_NOTES
from .waits import backward_ran

__all__ = ["BackwardRan", "ran_in_backward", "with_backward_ran"]


class BackwardRan:
    """The ops autograd's engine ran inside one record: its backward passes (``backward``)
    and the forward of checkpointed regions run again (``rerun``), each op with how many
    times it ran."""

    __slots__ = ("backward", "ran", "rerun")

    def __init__(self) -> None:
        self.backward: dict[Event, int] = {}
        self.rerun: dict[Event, int] = {}
        #: Whether autograd's engine ran inside the record.
        self.ran = False

    def add(self, event: Event, rerun: bool) -> None:
        """Add an op that ran in a backward pass (``rerun``: a forward run again there)."""
        found = self.rerun if rerun else self.backward
        found[event] = found.get(event, 0) + 1

    def run_again(self, event: Event) -> None:
        """An op added as backward was a forward run again (see
        :class:`~.body_backward.Undecided`)."""
        times = self.backward.get(event, 0)
        if times <= 1:
            self.backward.pop(event, None)
        else:
            self.backward[event] = times - 1
        self.rerun[event] = self.rerun.get(event, 0) + 1

    def flops(self) -> tuple[int, int, int]:
        """FLOPs of the backward passes, of the forwards run again, and of FlopCounterMode's
        kernels among both."""
        backward = sum(event.flops * times for event, times in self.backward.items())
        rerun = sum(event.flops * times for event, times in self.rerun.items())
        torch_counted = sum(
            event.flops * times
            for found in (self.backward, self.rerun)
            for event, times in found.items()
            if event.torch_counted
        )
        return backward, rerun, torch_counted

    def uncounted(self) -> list[str]:
        """Ops without a rule that ran in a backward pass."""
        found = (*self.backward, *self.rerun)
        return list(dict.fromkeys(f"{event.op} (backward)" for event in found if not event.counted))


def ran_in_backward(
    node: Any, calls: tuple[Any, ...], func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run an op autograd's engine runs (``node``: the node it runs for) and count it in
    each record open here (``calls``: the innermost call of each)."""
    out = func(*args, **kwargs)
    backward_ran()  # (the sums predicted for the graph it runs are sent: see .fan_in)
    sessions = {call.session for call in calls}
    for session in sessions:
        session.backward_ran.ran = True
    task = torch._C._current_graph_task_id()
    if UNDECIDED.ops:
        UNDECIDED.decide(task, node)
    if type(node) is ACCUMULATE and not run_by_hook():
        return out  # gradient accumulation: not a backward op (see the module)
    plan = plan_of(func)
    event: Event | None = None
    try:
        event = find_event(op_key(plan, args, kwargs, out), func, plan, args, kwargs, out)[1]
    except Exception:  # a tensor subclass, arguments no rule reads
        event = named_event(str(func))
    # a checkpointed region's forward run again: non-reentrant (its hooks say so; a region
    # entered while one runs again is inside it), or reentrant (a Function's backward that
    # runs ops to differentiate them: backward until an engine runs inside it)
    rerun = recomputing() or in_checkpoint()
    rans = [session.backward_ran for session in sessions]
    for ran in rans:
        ran.add(event, rerun)
    if not rerun and event.needs_grad and isinstance(node, FUNCTION_NODE):
        UNDECIDED.wait(task, node, event, rans)
    return out


def with_backward_ran(cost: Cost, ran: BackwardRan) -> Cost:
    """A record's total with its backward and recompute terms as they ran, if autograd's
    engine ran inside it (a term whose count differs from the prediction keeps the count,
    marked not exact)."""
    if not ran.ran:
        return cost
    backward, rerun, _ = ran.flops()
    changes: dict[str, Any] = {}
    if backward != cost.backward_flops:
        changes["backward"] = Term.of_count(backward, exact=False)
    if rerun != cost.recompute_flops:
        changes["recompute"] = Term.of_count(rerun, exact=False)
    missing = [name for name in ran.uncounted() if name not in cost.uncounted]
    if missing:
        changes["uncounted"] = (*cost.uncounted, *missing)
    # (what was foreseen of a backward gives way to what ran: its own notes, see .skipped_work)
    events = (*ran.backward, *ran.rerun)
    ran_notes = [e.assumed for e in events if e.assumed is not None]
    notes = [n for n in cost.assumed if n not in BACKWARD_NOTES or n in ran_notes]
    notes += [n for n in dict.fromkeys(ran_notes) if n not in notes]
    if tuple(notes) != cost.assumed:
        changes["assumed"] = tuple(notes)
    return dataclasses.replace(cost, **changes) if changes else cost
