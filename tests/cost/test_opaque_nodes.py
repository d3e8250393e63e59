"""A TorchScript function's backward, one ``DifferentiableGraphBackward`` node from its
second call on, is named among the uncounted ops where its backward would be predicted
(never a silent 0); a real backward inside ``record()`` counts what it runs."""

from __future__ import annotations

import warnings

import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import estimate, record

NAME = "DifferentiableGraphBackward (TorchScript graph)"


@torch.jit.script
def _fused(x: Tensor, w: Tensor) -> Tensor:
    return torch.tanh(x @ w)


class _Scripted(nn.Module):
    """A layer whose product and tanh run in a TorchScript function: (b, 8) -> (b, 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = _fused(x, self.weight)
        return out


def test_a_torchscript_graphs_backward_is_named_not_predicted_as_zero() -> None:
    model = _Scripted()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):  # (its profiling runs: then one differentiable graph)
            model(torch.randn(3, 8))
    assert type(model(torch.randn(3, 8)).grad_fn).__name__ == "CppFunction"
    cost = estimate(model, Float[Tensor, "b 8"], b=3)
    with record() as rec:
        model(torch.randn(3, 8))
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(3, 8))
    # the product 2·3·8·8, tanh's 3·8
    assert cost.flops == rec.total.flops == counter.get_total_flops() + 24 == 384 + 24
    assert NAME in cost.uncounted and NAME in rec.total.uncounted
    with record() as ran:
        model(torch.randn(3, 8)).sum().backward()
    assert ran.total.backward_flops > 2 * 3 * 8 * 8  # (what ran: the weight's product)
