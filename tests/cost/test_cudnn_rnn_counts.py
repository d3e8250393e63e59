"""cuDNN's recurrent kernel (``_cudnn_rnn``: ``nn.GRU``, ``nn.LSTM``, ``nn.RNN`` on a GPU),
counted on ``meta`` as a dry run for a GPU runs it: what a CPU's ops count for the same
layers, but the CPU's per-step sums of the hidden weights' gradients (cuDNN computes that
gradient over the sequence at once), with the same matrix products' part.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import Cost, estimate, record
from typedflops.cost.engine.kernels import kernels_of

LAYERS: dict[str, Callable[..., nn.RNNBase]] = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}
GATES = {"gru": 3, "lstm": 4, "rnn": 1}


class Sequence(nn.Module):
    """A recurrent layer as models hold one: ``(seq, batch, features)`` in, every step's
    output out."""

    def __init__(self, rnn: nn.RNNBase) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: Tensor) -> Tensor:
        return self.rnn(x)[0]  # type: ignore[no-any-return]


def for_a_gpu(kind: str, grad: bool, **options: Any) -> Cost:
    """``estimate()`` of the layer built on meta, costed for a GPU (seq 5 x batch 2 x 8)."""
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # (dropout with one layer)
        model = Sequence(LAYERS[kind](8, 16, **options))
    with kernels_of("cuda"):
        return estimate(model, Float[Tensor, "s b d"], s=5, b=2, d=8, grad=("x",) if grad else ())


def on_a_cpu(kind: str, grad: bool, **options: Any) -> tuple[int, int, int]:
    """Forward FLOPs, their matrix products and the backward a CPU ran for the same layer."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = Sequence(LAYERS[kind](8, 16, **options))
    x = torch.randn(5, 2, 8, requires_grad=grad)
    with record() as forward:
        model(x)
    with record() as both:
        model(x).sum().backward()
    total = forward.total
    return total.flops, total.matmul_flops, both.total.backward_flops


CASES = [
    ("gru", {}),
    ("rnn", {"nonlinearity": "relu", "bias": False}),
    ("lstm", {}),
    ("gru", {"num_layers": 2, "bidirectional": True}),
    ("lstm", {"num_layers": 2, "dropout": 0.5}),
    ("rnn", {"num_layers": 2, "bidirectional": True, "dropout": 0.5}),
]


@pytest.mark.parametrize(("kind", "options"), CASES, ids=[f"{k}-{o}" for k, o in CASES])
@pytest.mark.parametrize("grad", [True, False], ids=["x-grad", "no-x-grad"])
def test_cudnn_counts_what_a_cpu_counts_but_its_per_step_sums(
    kind: str, options: dict[str, Any], grad: bool
) -> None:
    cost = for_a_gpu(kind, grad, **options)
    forward, products, backward = on_a_cpu(kind, grad, **options)
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    bias = options.get("bias", True)
    # a CPU's GRU and RNN sum the hidden weights' (and bias's) gradients over the 5 steps
    sums = 0 if kind == "lstm" else layers * 4 * GATES[kind] * 16 * (16 + bias)
    assert (cost.flops, cost.matmul_flops, cost.backward_flops) == (
        forward,
        products,
        backward - sums,
    )
    assert (cost.exact, cost.uncounted) == (True, ())


def test_a_gru_by_hand() -> None:
    # GRU(8, 16), 5 steps x batch 2 = 10 positions, 3 gates of 16 (48)
    forward = 10 * (2 * 48 * (8 + 16) + 10 * 16)  # products and 10 ops a hidden value
    weights = 10 * 2 * 48 * (8 + 16) + 10 * 2 * 48  # the weights' and the biases' gradients
    hidden = (10 - 2) * 2 * 48 * 16  # the state's gradient after the first step
    cells = (11 * 10 - 2 * 2) * 16  # 11 a value, 2 fewer at the first step (h0 needs none)
    with_input = 10 * 2 * 48 * 8
    cost = for_a_gpu("gru", grad=True)
    assert (cost.flops, cost.backward_flops) == (24_640, 45_664)
    assert (forward, weights + hidden + cells + with_input) == (24_640, 45_664)
    assert for_a_gpu("gru", grad=False).backward_flops == 45_664 - with_input


@pytest.mark.parametrize("packed_weights", [True, False], ids=["weight-buffer", "no-buffer"])
def test_a_backward_is_predicted_with_or_without_a_weight_buffer(packed_weights: bool) -> None:
    """On a GPU, bfloat16 weights reach the kernel unpacked (no buffer): a replay on meta to
    find the backward gets one, as the kernel makes its own."""
    x = torch.empty(5, 2, 8, device="meta", requires_grad=True)
    shapes = [(48, 8), (48, 16), (48,), (48,)]
    weights = [torch.empty(s, device="meta", requires_grad=True) for s in shapes]
    buffer = torch.empty(sum(w.numel() for w in weights), device="meta")
    h0 = torch.empty(1, 2, 16, device="meta")
    with record() as rec:
        torch._cudnn_rnn(
            x, weights, 4, buffer if packed_weights else None, h0, None, 3, 16, 0, 1,
            False, 0.0, True, False, [], None,
        )  # fmt: skip
    total = rec.total
    assert (total.flops, total.backward_flops, total.uncounted) == (24_640, 45_664, ())


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("kind", ["gru", "lstm", "rnn"])
def test_frozen_layers_under_an_initial_state_that_needs_a_gradient(
    kind: str, bidirectional: bool
) -> None:
    """Two frozen layers, the input needing no gradient, ``h0`` needing one: every upper
    layer's input gradient is computed (the lower layer's ``h0`` needs it)."""
    states = 2 * (2 if bidirectional else 1)

    def run(device: str) -> int:
        torch.manual_seed(0)
        with torch.device(device):
            rnn = LAYERS[kind](8, 16, num_layers=2, bidirectional=bidirectional)
            rnn.requires_grad_(False)
            x = torch.randn(5, 2, 8) if device == "cpu" else torch.empty(5, 2, 8)
            h0 = torch.zeros(states, 2, 16, requires_grad=True)
            state: Any = (h0, torch.zeros(states, 2, 16)) if kind == "lstm" else h0
        with kernels_of("cuda" if device == "meta" else None), record() as rec:
            out, _ = rnn(x, state)
            if device == "cpu":
                out.sum().backward()
        return rec.total.backward_flops

    # a CPU's LSTM selects h0 for each layer and direction, and autograd sums the slices'
    # gradients: (states - 1) x h0's values
    slices = (states - 1) * states * 2 * 16 if kind == "lstm" else 0
    assert run("meta") == run("cpu") - slices
