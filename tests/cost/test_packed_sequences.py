"""Packed sequences through torch's recurrent layers, and the tensor a write through a
slice fills: a record's prediction of the backward equals the backward that runs.

``pad_packed_sequence`` makes its output with ``new_full`` (no grad) and fills it step
group by step group with ``copy_`` into slices of it: the first write gives the output its
history (autograd's ``CopySlices``), and each slice of the packed values read is an edge,
their gradients summed in backward. The oracle is a real backward inside ``record()``.
"""

from __future__ import annotations

import pytest
import torch
from jaxtyping import Float
from kernel_counts import ran_and_predicted
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from typedflops import estimate, record, typed_flops


def _filled(x: Tensor, writes: int) -> Tensor:
    """``x * 2`` (4 x 4) copied into a new zero tensor through ``writes`` row slices."""
    y = x * 2
    out = y.new_zeros(y.shape)
    rows = 4 // writes
    for at in range(0, 4, rows):
        out[at : at + rows].copy_(y[at : at + rows])
    return out.sum()


@pytest.mark.parametrize("writes", [1, 2, 4])
def test_a_tensor_filled_through_slices_costs_the_backward_that_runs(writes: int) -> None:
    # the product's backward (16 multiplies) and the writes - 1 sums of y's gradients (16
    # adds each); before, the first write was reached by nothing: 0 with one write
    expected = 16 + 16 * (writes - 1)

    @typed_flops
    def program(x: Float[Tensor, "4 4"]) -> Float[Tensor, ""]:
        return _filled(x, writes)

    assert ran_and_predicted(program) == (expected, expected)
    cost = estimate(program, grad=("x",))
    assert (cost.backward_flops, cost.exact) == (expected, True)


LAYERS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}


@pytest.mark.parametrize("kind", sorted(LAYERS))
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("lengths", [(4, 3, 2, 1), (3, 3), (5, 2, 2, 1)])
def test_a_packed_sequence_through_a_recurrent_layer_predicts_its_backward(
    kind: str, layers: int, bidirectional: bool, lengths: tuple[int, ...]
) -> None:
    torch.manual_seed(0)
    rnn = LAYERS[kind](4, 6, num_layers=layers, bidirectional=bidirectional, batch_first=True)
    x = torch.randn(len(lengths), max(lengths), 4, requires_grad=True)
    sizes = torch.tensor(lengths)
    counts = []
    for backward in (False, True):
        with record() as rec:
            packed = pack_padded_sequence(x, sizes, batch_first=True, enforce_sorted=False)
            out, h = rnn(packed)
            last = h[0] + h[1] if isinstance(h, tuple) else h  # (an LSTM's h_n and c_n)
            padded, _ = pad_packed_sequence(out, batch_first=True)
            loss = padded.sum() + last.sum()
            del packed, out, h, last, padded
            if backward:
                loss.backward()
        counts.append((rec.total.backward_flops, rec.total.backward.exact))
    predicted, ran = counts
    assert predicted == (ran[0], True)
    assert ran[1]  # (the backward that ran is the prediction)
