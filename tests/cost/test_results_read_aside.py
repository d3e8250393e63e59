"""A result read aside — by ops that send it no gradient (a statistic under ``no_grad``, a
comparison, a detached copy's reader, a saved-tensor hook) — is still a result: held where
a decorated call returns or a record's block ends, a backward may start from it, and its
ops' backward is predicted. (Let go after such reads only, it is no result: see
``test_gradient_sums.py``.)

Hand counts: ``tanh(x @ w)`` with ``x`` 8x16 and ``w`` 16x16 runs one product of
P = 2·8·16·16 = 4,096 FLOPs and 128 tanh; its backward is a product of P per operand that
needs grad and tanh's 128.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import record, typed_flops

P = 2 * 8 * 16 * 16
TANH = 8 * 16
torch.manual_seed(0)
W = torch.randn(16, 16, requires_grad=True)
NORMS: list[Tensor] = []


@typed_flops
def checked_finite(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    """A layer that checks its output through a temporary that needs grad."""
    y = torch.tanh(x @ W)
    assert torch.isfinite(y).all()
    return y


def test_a_result_read_by_a_temporary_let_go_in_its_call_is_predicted_its_backward() -> None:
    x = torch.randn(8, 16)
    with record() as predicted:
        checked_finite(x)
    with record() as ran:
        checked_finite(x).sum().backward()
    (row,) = predicted.calls
    assert row.cost().backward_flops == ran.total.backward_flops == P + TANH


@typed_flops
def logged(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    """A layer that keeps the norm of its output for a log, under ``no_grad``."""
    y = torch.tanh(x @ W)
    with torch.no_grad():
        NORMS.append(y.norm())
    return y


def test_a_result_read_under_no_grad_in_its_call_is_predicted_its_backward() -> None:
    x = torch.randn(8, 16)
    assert logged.estimate(n=8, d=16).backward_flops == P + TANH
    with record() as predicted:
        logged(x)
    with record() as ran:
        logged(x).sum().backward()
    assert predicted.calls[0].cost().backward_flops == P + TANH
    assert predicted.total.backward_flops == ran.total.backward_flops == P + TANH


def _no_grad_norm(y: Tensor) -> None:
    with torch.no_grad():
        y.norm()


def _accuracy(y: Tensor) -> None:
    (y.argmax(-1) == 0).float().mean()


def _detached_read(y: Tensor) -> None:
    y.detach().clone()


def _summed_item(y: Tensor) -> None:
    y.sum().item()  # (a sum that needs grad, let go once read)


def _all_finite(y: Tensor) -> None:
    assert torch.isfinite(y).all()  # (its abs needs grad, let go once compared)


@pytest.mark.parametrize(
    "aside", [_no_grad_norm, _accuracy, _detached_read, _summed_item, _all_finite]
)
def test_a_result_held_at_the_end_of_a_block_and_read_aside_is_predicted(
    aside: Callable[[Tensor], None],
) -> None:
    x = torch.randn(8, 16, requires_grad=True)
    with record() as predicted:
        y = torch.tanh(x @ W)
        aside(y)
    with record() as ran:
        y = torch.tanh(x @ W)
        aside(y)
        y.sum().backward()
    assert predicted.total.backward_flops == ran.total.backward_flops == 2 * P + TANH
    assert predicted.total.backward.exact


@pytest.mark.parametrize(
    ("pack", "unpack"),
    [
        (lambda t: t.detach(), lambda t: t),
        (lambda t: t.to(torch.bfloat16), lambda t: t.float()),  # (activations kept in 16 bits)
    ],
    ids=["detach", "bfloat16"],
)
def test_saved_tensor_hooks_do_not_hide_the_backward(
    pack: Callable[[Tensor], Tensor], unpack: Callable[[Tensor], Tensor]
) -> None:
    x = torch.randn(8, 16, requires_grad=True)
    with record() as rec, torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = torch.tanh(x @ W)
    del y
    assert rec.total.backward_flops == 2 * P + TANH
