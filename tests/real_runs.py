"""What a real run counted: the oracle the cost tests compare estimates with."""

from __future__ import annotations

from torch import Tensor, nn

from typedflops import record


def ran(model: nn.Module, *args: Tensor) -> tuple[int, int]:
    """Forward FLOPs of ``model(*args)`` (a scalar) and the backward that ran from it."""
    with record() as forward:
        model(*args)
    with record() as both:
        model(*args).backward()
    return forward.total.flops, both.total.backward_flops
