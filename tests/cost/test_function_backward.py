"""A ``torch.autograd.Function`` whose backward runs autograd itself (reentrant checkpointing,
a backward taking ``torch.autograd.grad`` of a forward it runs again) is counted as it runs:
its backward and the forward it runs again (``recompute_flops``), never listed as uncounted,
and never writing into the ``.grad`` of the user's tensors.

Hand counts: ``Linear(16, 32) -> relu -> Linear(32, 4)`` at batch 8 runs 2·8·16·32 = 8,192
and 2·8·32·4 = 2,048 FLOPs in its matrix products and 256 in the relu (10,496); its backward,
with the input requiring grad, two products per layer (2·8,192 and 2·2,048), the relu's
gradient (256) and the biases' gradients (sums of 8·32 and 8·4 values): 21,024.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.utils.checkpoint as checkpoint
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

import typedflops
from typedflops import record, typed_flops

FORWARD = 2 * 8 * 16 * 32 + 8 * 32 + 2 * 8 * 32 * 4
BACKWARD = 2 * (2 * 8 * 16 * 32) + 8 * 32 + 8 * 32 + 2 * (2 * 8 * 32 * 4) + 8 * 4
MATMUL_BACKWARD = 2 * (2 * 8 * 16 * 32) + 2 * (2 * 8 * 32 * 4)


class Block(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 4)
        self.reentrant = reentrant

    def body(self, x: Tensor) -> Tensor:
        out: Tensor = self.down(torch.relu(self.up(x)))
        return out

    @typed_flops
    def forward(self, x: Float[Tensor, "n 16"]) -> Float[Tensor, "n 4"]:
        out: Tensor = checkpoint.checkpoint(self.body, x, use_reentrant=self.reentrant)
        return out


def _grads(module: nn.Module) -> list[Any]:
    return [p.grad for p in module.parameters()]


def test_reentrant_checkpointing_counts_its_backward_and_its_forward_run_again() -> None:
    torch.manual_seed(0)
    block = Block(reentrant=True)
    x = torch.randn(8, 16, requires_grad=True)
    with record() as rec:
        block(x)
    total = rec.total
    assert total.uncounted == ()
    assert (total.flops, total.backward_flops, total.recompute_flops) == (
        FORWARD,
        BACKWARD,
        FORWARD,  # the whole body runs again: reentrant checkpointing does not stop early
    )
    assert total.exact
    assert str(total.recompute_formula) == "1312*n"
    # as the non-reentrant kind, whose forward and backward are the same kernels
    with record() as plain:
        Block(reentrant=False)(x)
    assert plain.total.backward_flops == total.backward_flops == BACKWARD


def test_reentrant_checkpointing_matches_flop_counter_mode_on_the_run() -> None:
    block = Block(reentrant=True)
    x = torch.randn(8, 16, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        block(x).sum().backward()
    with record() as rec:
        block(x).sum().backward()
    # FlopCounterMode sees the products of the forward, of the forward run again in
    # backward and of the backward
    total = rec.total
    assert counter.get_total_flops() == 2 * (8192 + 2048) + MATMUL_BACKWARD
    assert total.matmul_flops + MATMUL_BACKWARD + 8192 + 2048 == counter.get_total_flops()


def test_reentrant_checkpointing_run_in_the_record_is_its_backward_and_its_forward_again() -> None:
    # the backward as it ran: the body run again inside the Function's backward, then
    # differentiated by autograd's engine run inside it; the loss's sum adds 8·4 forward
    block = Block(reentrant=True)
    x = torch.randn(8, 16, requires_grad=True)
    with record() as rec:
        block(x).sum().backward()
    total = rec.total
    assert (total.flops, total.backward_flops, total.recompute_flops) == (
        FORWARD + 8 * 4,
        BACKWARD,
        FORWARD,
    )
    w = torch.randn(16, 4, requires_grad=True)
    with record() as rec:
        (regrad(x, w) * 2).sum().backward()
    total = rec.total
    # * 2's gradient, tanh's, and the two products of the gradients
    assert total.backward_flops == 8 * 4 + 8 * 4 + 2 * (2 * 8 * 16 * 4)
    assert total.recompute_flops == 2 * 8 * 16 * 4 + 8 * 4


def test_counting_a_functions_backward_leaves_the_users_gradients_alone() -> None:
    torch.manual_seed(0)
    block = Block(reentrant=True)
    x = torch.randn(8, 16, requires_grad=True)
    with record():
        y = block(x)
    assert _grads(block) == [None] * 4 and x.grad is None
    y.sum().backward()
    recorded = [g.clone() for g in _grads(block)]
    assert all(type(g) is torch.Tensor for g in recorded)
    block.zero_grad(set_to_none=True)
    block(x).sum().backward()
    for ours, plain in zip(recorded, _grads(block), strict=True):
        assert torch.equal(ours, plain)


def test_an_estimate_of_reentrant_checkpointing_counts_what_a_record_does() -> None:
    block = Block(reentrant=True)
    cost = typedflops.estimate(block, n=8, grad=("x",))
    assert cost.uncounted == ()
    assert (cost.flops, cost.backward_flops, cost.recompute_flops) == (FORWARD, BACKWARD, FORWARD)
    assert cost.exact
    assert _grads(block) == [None] * 4


class _Regrad(torch.autograd.Function):
    """``tanh(x @ w)``; its backward runs the product again and takes its gradient with
    ``torch.autograd.grad`` (as code that saves memory does)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor) -> Tensor:
        ctx.save_for_backward(x, w)
        return torch.tanh(x @ w)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, w = ctx.saved_tensors
        with torch.enable_grad():
            x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
            out = torch.tanh(x @ w)
        found = torch.autograd.grad(out, (x, w), grad)
        return found[0], found[1]


@typed_flops
def regrad(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
    out: Tensor = _Regrad.apply(x, w)  # type: ignore[no-untyped-call]
    return out


@pytest.mark.parametrize(("n", "d", "k"), [(8, 16, 4), (3, 5, 7)])
def test_a_backward_that_takes_autograd_grad_is_counted(n: int, d: int, k: int) -> None:
    x = torch.randn(n, d, requires_grad=True)
    w = torch.randn(d, k, requires_grad=True)
    with record() as rec:
        regrad(x, w) * 2
    total = rec.total
    assert total.uncounted == ()
    assert total.flops == 2 * n * d * k + n * k + n * k  # the product, tanh, the * 2
    # tanh's gradient (a multiply and a subtract per value, torch's tanh_backward: one op)
    # and the two products of the gradients
    assert total.backward_flops == n * k + n * k + 2 * (2 * n * d * k)
    assert total.recompute_flops == 2 * n * d * k + n * k
    assert x.grad is None and w.grad is None
