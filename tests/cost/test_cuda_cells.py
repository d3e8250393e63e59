"""``nn.LSTMCell`` and ``nn.GRUCell`` on a GPU: the input's and the state's products, then
CUDA's fused cell kernel, counted as its rule says (cost/engine/cuda_cells.py) by a dry run
for a GPU and by a record on meta inside ``kernels_of("cuda")`` alike."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import estimate, record
from typedflops.cost.engine.kernels import kernels_of

B, FEATURES, H = 2, 8, 16  # batch rows, input features, hidden features


def products(gates: int) -> tuple[int, int]:
    """The products around the cell: forward x @ w_ih.T and h @ w_hh.T; backward the
    input's and both weights' gradients (h0 needs none)."""
    forward = 2 * B * gates * H * (FEATURES + H)
    return forward, 2 * B * gates * H * FEATURES + forward


CASES: list[tuple[str, Callable[..., nn.Module], bool, int, int]] = [
    # LSTM: 13H a row forward; backward 11H a row and one sum of the 4H gates' gradients
    ("lstm", nn.LSTMCell, True, 13 * B * H, 11 * B * H + 4 * B * H),
    # GRU: 10H a row forward; backward 10H a row and two sums of 3H
    ("gru", nn.GRUCell, True, 10 * B * H, 10 * B * H + 2 * 3 * B * H),
    ("gru-no-bias", nn.GRUCell, False, 10 * B * H, 10 * B * H),
    # without biases, the fused cell too (torch's meta kernel refuses it: run as a GPU's)
    ("lstm-no-bias", nn.LSTMCell, False, 13 * B * H, 11 * B * H),
]


@pytest.mark.parametrize(
    ("make", "bias", "cell_forward", "cell_backward"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_a_cell_for_a_gpu_is_two_products_and_the_fused_cell(
    make: Callable[..., nn.Module], bias: bool, cell_forward: int, cell_backward: int
) -> None:
    with torch.device("meta"):
        cell = make(FEATURES, H, bias=bias)
    gates = 4 if make is nn.LSTMCell else 3
    forward, backward = products(gates)
    x = torch.empty(B, FEATURES, device="meta", requires_grad=True)
    with kernels_of("cuda"):
        cost = estimate(cell, Float[Tensor, "b d"], b=B, d=FEATURES, grad=("input",))
        with record() as rec:
            cell(x)
    expected = (forward + cell_forward, backward + cell_backward)
    assert (cost.flops, cost.backward_flops) == expected
    assert (cost.matmul_flops, cost.exact, cost.uncounted) == (forward, True, ())
    assert (rec.total.flops, rec.total.backward_flops) == expected


def test_a_bias_less_lstm_cell_replayed_for_its_backward() -> None:
    """A record's backward of the fused cell without biases, replayed on meta (as a GPU's
    record replays it): 11H a row, no biases' sum; its three inputs get gradients."""
    gates = torch.empty(B, 4 * H, device="meta", requires_grad=True)
    hidden = torch.empty(B, 4 * H, device="meta", requires_grad=True)
    cx = torch.empty(B, H, device="meta", requires_grad=True)
    with record() as rec:
        hy, cy, _ = torch.ops.aten._thnn_fused_lstm_cell(gates, hidden, cx)
    assert (hy.shape, cy.shape) == ((B, H), (B, H))
    assert (rec.total.flops, rec.total.backward_flops) == (13 * B * H, 11 * B * H)
    assert rec.total.uncounted == ()
