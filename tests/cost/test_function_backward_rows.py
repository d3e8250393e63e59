"""In a record, a ``torch.autograd.Function``'s backward is a row of its own in the op
breakdown, named after the Function (as an estimate lists it), whichever op takes its
output: outside any decorated call and inside one's body alike. The op that takes it (a
``sum``) keeps its own backward, 0.

Hand counts: ``Product`` multiplies an 8x16 ``x`` by a 16x4 ``w`` (2·8·16·4 = 1,024) and
its backward runs two products of the same size (2,048); the ``sum`` of the 8x4 result is
32 forward and 0 backward (its gradient is an expand). Reentrant checkpointing of
``Linear(16, 32) -> relu -> Linear(32, 4)`` (no bias) at batch 8 with the input needing
grad runs, in its Function's backward, two products per layer and
the relu's gradient: 2·(2·8·16·32) + 2·(2·8·32·4) + 8·32 = 20,736.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.checkpoint as checkpoint
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import record, typed_flops
from typedflops.cost.types import Cost

PRODUCT = 2 * 8 * 16 * 4
CHECKPOINT_BACKWARD = 2 * (2 * 8 * 16 * 32) + 2 * (2 * 8 * 32 * 4) + 8 * 32


class Product(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        a, b = ctx.saved_tensors
        return grad @ b.t(), a.t() @ grad


@typed_flops
def summed(x: Float[Tensor, "n 16"], w: Float[Tensor, "16 4"]) -> Float[Tensor, ""]:
    out: Tensor = Product.apply(x, w)  # type: ignore[no-untyped-call]
    return out.sum()


def _rows(cost: Cost) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for op in cost.ops:
        forward, backward = found.get(op.op, (0, 0))
        found[op.op] = (forward + op.forward.count, backward + op.backward.count)
    return found


def test_a_functions_backward_is_its_own_row_outside_calls() -> None:
    x = torch.randn(8, 16)
    w = torch.randn(16, 4, requires_grad=True)
    with record() as rec:
        Product.apply(x, w).sum().backward()  # type: ignore[no-untyped-call]
    rows = _rows(rec.total)
    assert rows["Product (backward)"] == (0, 2 * PRODUCT)
    assert rows["sum"] == (32, 0)
    assert rec.total.backward_flops == 2 * PRODUCT


def test_a_functions_backward_is_its_own_row_in_a_calls_body() -> None:
    x = torch.randn(8, 16)
    w = torch.randn(16, 4, requires_grad=True)
    with record() as rec:
        summed(x, w).backward()
    rows = _rows(rec.total)
    assert rows["Product (backward)"] == (0, 2 * PRODUCT)
    assert rows["sum"] == (32, 0)


def test_reentrant_checkpointings_backward_is_its_own_row() -> None:
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(16, 32, bias=False), nn.ReLU(), nn.Linear(32, 4, bias=False))
    x = torch.randn(8, 16, requires_grad=True)
    with record() as rec:
        checkpoint.checkpoint(body, x, use_reentrant=True).sum().backward()
    rows = _rows(rec.total)
    assert rows["CheckpointFunction (backward)"] == (0, CHECKPOINT_BACKWARD)
    assert rows["sum"] == (32, 0)
    assert rec.total.backward_flops == CHECKPOINT_BACKWARD


def test_the_op_that_takes_a_functions_output_stays_one_row() -> None:
    # a batched product takes the Function's (2, 8, 4) output by a reshape before its
    # product: 2·16·4·5 = 640 forward, and 640 backward (its gradient to that output);
    # the Function's backward runs two products of 2·2·8·16·4 = 2,048 and the sum of w's
    # gradient over the batch (one per value summed, 2·16·4 = 128)
    x = torch.randn(2, 8, 16)
    w = torch.randn(16, 4, requires_grad=True)
    v = torch.randn(4, 5)
    with record() as rec:
        (Batched.apply(x, w) @ v).sum().backward()  # type: ignore[no-untyped-call]
    rows = [(op.op, op.forward.count, op.backward.count) for op in rec.total.ops]
    assert rows[:4] == [
        ("matmul", 2048, 0),
        ("Batched (backward)", 0, 2 * 2048 + 128),
        ("matmul", 640, 640),
        ("sum", 80, 0),
    ]


class Batched(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        a, b = ctx.saved_tensors
        return grad @ b.t(), (a.transpose(-1, -2) @ grad).sum(0)


def test_a_function_whose_backward_runs_nothing_adds_no_row() -> None:
    # a module's full backward hook wraps its input and output in a Function whose backward
    # hands the gradients on: no op, no row; the hook's own product counts in the total
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(16, 32, bias=False), nn.ReLU(), nn.Linear(32, 4, bias=False))

    def doubled(module: nn.Module, grad_in: Any, grad_out: Any) -> tuple[Tensor]:
        return (grad_in[0] * 2,)

    body[2].register_full_backward_hook(doubled)
    x = torch.randn(8, 16)
    with record() as rec:
        body(x).sum().backward()
    names = [op.op for op in rec.total.ops]
    assert not any("BackwardHookFunction" in name for name in names)
    # the products' gradients (w1's and w2's, and the input of the second layer), the
    # relu's, and the hook's doubling of an 8x32 gradient
    assert rec.total.backward_flops == 2 * 8 * 16 * 32 + 2 * (2 * 8 * 32 * 4) + 8 * 32 + 8 * 32
