"""Backward nodes whose work no op of a dry run or a record shows.

A TorchScript function (``@torch.jit.script``) called with tensors that need grad runs, from
its second call on, as one differentiable graph: its forward ops run with autograd off and
its outputs get one ``DifferentiableGraphBackward`` node, whose backward runs the graph's
own derivative. No op seen in forward says what that backward costs, so the node is named
among the uncounted ops of the call that takes its output (its backward is not predicted),
never a silent 0. A real backward inside ``record()`` counts what it runs.
"""

from __future__ import annotations

from typing import Any

from .events import Sink, named_event

__all__ = ["OPAQUE", "opaque_backward"]

#: The names of the nodes (C++ functions to Python) whose backward is not predicted.
OPAQUE = frozenset({"DifferentiableGraphBackward"})


def opaque_backward(sink: Sink, node: Any) -> None:
    """Name ``node``'s backward in ``sink`` as uncounted if it is one of :data:`OPAQUE`."""
    if type(node).__name__ == "CppFunction":
        name = node.name().rsplit("::", 1)[-1]  # (torch::jit::...::DifferentiableGraphBackward)
        if name in OPAQUE:
            sink.add(named_event(f"{name} (TorchScript graph)"))
