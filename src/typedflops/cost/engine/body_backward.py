"""The backward passes a body runs itself in a dry run, counted as they run.

A body may run autograd's engine inside the call: a training step's ``loss.backward()``,
forces as the gradient of an energy (``torch.autograd.grad(energy, positions)``), a
gradient penalty. ``record()`` counts those ops in its ``backward_flops`` as they run (see
:mod:`.backward_ran`); a dry run counts them likewise: each op the engine runs during the
forward phase is the backward of an event of no forward FLOPs (or its forward run again,
where a ``torch.autograd.Function``'s backward runs autograd's engine after it: reentrant
checkpointing, told apart by :class:`Undecided` as in a record), so an estimate's
backward holds the backward the body ran besides the one predicted over its graph, as a
record's total does. Not counted there: the adds of gradient accumulation into ``.grad``
(as in a record), and a non-reentrant checkpointed region's forward run again (its
recompute is predicted for every region, whether or not a backward runs in the body).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import types
from typing import Any

import torch

from .edges import op_tensors
from .events import Event, named_event
from .op_events import make_event
from .rules import find_rule
from .saved import in_checkpoint, recomputing
from .saved_reads import alias

__all__ = [
    "ACCUMULATE",
    "FUNCTION_NODE",
    "UNDECIDED",
    "Undecided",
    "ran_in_body_backward",
    "run_by_hook",
]

#: The node of a ``torch.autograd.Function``'s backward.
FUNCTION_NODE = torch.autograd.function.BackwardCFunction
#: The node that adds a leaf's gradient into its ``.grad``.
ACCUMULATE = torch._C._functions.AccumulateGrad  # type: ignore[attr-defined]
#: torch's frames between an op and a dispatch mode (a mode above ours, its wrappers).
_TORCH = os.path.dirname(torch.__file__)
_DISPATCH_FILES = frozenset(
    os.path.join(_TORCH, *path.split("/"))
    for path in ("_ops.py", "_compile.py", "_dynamo/eval_frame.py", "utils/_python_dispatch.py")
)
#: The Python function that hands a backward pass to autograd's engine.
_ENGINE_CALLER = "_engine_run_backward"


def ran_in_body_backward(
    mode: Any, node: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run an op that autograd's engine runs (for ``node``) inside a dry run's body, and
    add it to ``mode``'s sink as the backward it is."""
    out = func(*args, **kwargs)
    task = torch._C._current_graph_task_id()
    if UNDECIDED.ops:
        UNDECIDED.decide(task, node)
    if recomputing() or in_checkpoint():
        return out  # (a checkpointed region run again: its recompute is predicted already)
    if type(node) is ACCUMULATE and not run_by_hook():
        return out  # (gradient accumulation: not a backward op)
    try:
        event = make_event(func, find_rule(func), args, kwargs, out)
    except Exception:  # a tensor subclass, arguments no rule reads
        event = named_event(str(func))
    carrier = _Carrier(event)
    mode.sink.add(carrier.event)
    if event.needs_grad and isinstance(node, FUNCTION_NODE):
        # (a Function's backward: a forward run again, reentrant checkpointing, if an
        # engine then runs inside it; else a backward building a graph)
        UNDECIDED.wait(task, node, event, [carrier])
    elif event.needs_grad:  # (``create_graph=True``: a backward through it is predicted too)
        graph = dataclasses.replace(
            event, flops=0, matmul_flops=0, bytes_read=0, bytes_written=0, backward=[], rerun=[]
        )
        mode.sink.add(graph)
        saved = getattr(mode.sink, "saved", None)
        if saved is not None and saved.unpacked:  # (a saved tensor read: the one saved)
            for tensor in op_tensors(args, kwargs):
                original = saved.original_of(tensor)
                if original is not None:
                    alias(mode.sums, tensor, original)
        mode.edges(graph, func, args, kwargs, out)
    return out


class _Carrier:
    """An event of no forward FLOPs whose backward is one op the body's backward ran, or
    whose forward run again it is, once told (:meth:`run_again`)."""

    def __init__(self, ran: Event) -> None:
        self.event = named_event(f"{ran.op} (backward the body ran)", 0)
        self.event.needs_grad = True
        self.event.backward = [ran]

    def run_again(self, ran: Event) -> None:
        """``ran`` was a forward run again (reentrant checkpointing): recomputed."""
        self.event.backward = []
        self.event.rerun = [ran]


def run_by_hook() -> bool:
    """Whether the op running in an ``AccumulateGrad`` node was called by Python code the
    engine called (a hook of the leaf) rather than by the engine's add into ``.grad``: past
    the dispatch modes' frames, the add finds the engine's caller (or none, on a device's
    thread of the engine)."""
    frame: types.FrameType | None = sys._getframe(2)  # (past this and its caller)
    while frame is not None and (
        frame.f_code.co_name == "__torch_dispatch__" or frame.f_code.co_filename in _DISPATCH_FILES
    ):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_name != _ENGINE_CALLER


class Undecided(threading.local):
    """The ops needing grad that a ``torch.autograd.Function``'s backward ran in autograd's
    engine, counted as backward until it is known what they are, by graph task: a forward
    run again to be differentiated (reentrant checkpointing, ``torch.autograd.grad`` of a
    product recomputed) if an engine runs inside the Function's backward after them (a
    graph task begun while its node runs); else its backward, building the graph of a
    gradient of a gradient (``create_graph=True``), once the task goes on to another node
    or ends."""

    def __init__(self) -> None:
        self.ops: dict[int, tuple[Any, list[tuple[Event, list[Any]]]]] = {}

    def wait(self, task: int, node: Any, event: Event, rans: list[Any]) -> None:
        """``event`` ran needing grad in the Function's ``node`` of graph ``task``."""
        found = self.ops.get(task)
        if found is None or found[0] is not node:
            ops = self.ops
            found = ops[task] = (node, [])

            def ended(waiting: Any = found) -> None:  # (the task ended: its backward)
                if ops.get(task) is waiting:
                    del ops[task]

            torch.autograd.Variable._execution_engine.queue_callback(ended)
        found[1].append((event, rans))

    def decide(self, task: int, node: Any) -> None:
        """An op autograd's engine runs for ``node`` in graph ``task``: a Function's node
        that waits in another task runs this engine inside its backward (what it ran
        needing grad is run again); one of this task, another node, has returned."""
        for waiting_task, (waiting_node, ops) in list(self.ops.items()):
            if waiting_task != task:
                for event, rans in ops:
                    for ran in rans:
                        ran.run_again(event)
            elif waiting_node is node:
                continue
            del self.ops[waiting_task]

    def holds(self, ran: Any) -> bool:
        """Whether an op ``ran`` counted waits to be told apart (a record closed inside a
        Function's backward before it ran an engine: its total may change)."""
        return any(ran in rans for _, ops in self.ops.values() for _, rans in ops)


#: The ops of this thread waiting to be told apart.
UNDECIDED = Undecided()
