"""A dry run for a CPU runs torch's recurrent layers as a CPU does: GRU and plain RNN layers
multiply the whole sequence by the input weights at once, LSTM layers run oneDNN's fused
kernel. ``estimate()`` of a module holding one (its weights copied to ``meta``) then equals
what a CPU ran, forward and backward; on ``meta``'s own step-by-step path the input
weights' gradients would be summed over the steps.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from typedflops import estimate, record
from typedflops.cost.engine.kernels import kernels_of
from typedflops.cost.engine.rnn_cpu import rnn_as_cpu

LAYERS: dict[str, Callable[..., nn.RNNBase]] = {"gru": nn.GRU, "lstm": nn.LSTM}
LAYERS.update(rnn_tanh=nn.RNN, rnn_relu=nn.RNN)


def layer(kind: str, features: int, hidden: int, **options: Any) -> nn.RNNBase:
    if kind.startswith("rnn"):
        options["nonlinearity"] = kind.removeprefix("rnn_")
    with warnings.catch_warnings():  # (dropout with one layer)
        warnings.simplefilter("ignore", UserWarning)
        return LAYERS[kind](features, hidden, **options)


class Sequence(nn.Module):
    """A recurrent layer as models hold one: ``(batch, seq, features)`` in, the outputs of
    every step out, the last state dropped."""

    def __init__(self, rnn: nn.RNNBase) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: Float[Tensor, "b s d"]) -> Tensor:
        out, _ = self.rnn(x)
        return out  # type: ignore[no-any-return]


def ran(model: nn.Module, x: Tensor) -> tuple[int, int]:
    """Forward FLOPs of ``model(x)`` and the backward FLOPs that ran from its outputs' sum
    (the sum's own backward, an expand, counts 0)."""
    with record() as forward:
        model(x)
    with record() as both:
        model(x).sum().backward()
    return forward.total.flops, both.total.backward_flops


CASES = [
    ("gru", {}),
    ("rnn_tanh", {}),
    ("rnn_relu", {"num_layers": 2}),
    ("gru", {"num_layers": 2, "bidirectional": True, "bias": False}),
    ("lstm", {}),
    ("lstm", {"num_layers": 2, "bidirectional": True}),
    ("lstm", {"proj_size": 3}),
]


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize(("kind", "options"), CASES, ids=[f"{k}-{o}" for k, o in CASES])
@pytest.mark.parametrize("features", [8, 16])
def test_estimate_of_a_module_holding_a_recurrent_layer_equals_the_cpu_run(
    kind: str, options: dict[str, Any], features: int
) -> None:
    torch.manual_seed(0)
    model = Sequence(layer(kind, features, 16, batch_first=True, **options))
    x = torch.randn(2, 5, features, requires_grad=True)
    cost = estimate(model, Float[Tensor, "b s d"], b=2, s=5, d=features, grad=("x",))
    assert (cost.flops, cost.backward_flops) == ran(model, x)
    assert cost.exact
    # the formula holds at other batch sizes and lengths (checked against runs)
    other = torch.randn(3, 7, features, requires_grad=True)
    assert cost.backward.at({"b": 3, "s": 7}) == ran(model, other)[1]


def test_the_gru_by_hand_has_one_sum_of_the_input_weights_gradients_a_step_fewer() -> None:
    # GRU(8, 16), batch 2 x 5 steps: meta's step-by-step path would sum the input weights'
    # (3H x I = 384) and biases' (3H = 48) gradients over the steps, 4 x 432 more
    model = Sequence(nn.GRU(8, 16, batch_first=True))
    cost = estimate(model, Float[Tensor, "b s d"], b=2, s=5, d=8, grad=("x",))
    assert cost.backward_flops == 48_928
    with torch.device("meta"):
        on_meta = Sequence(nn.GRU(8, 16, batch_first=True))
    meta_own = estimate(on_meta, Float[Tensor, "b s d"], b=2, s=5, d=8, grad=("x",))
    assert meta_own.backward_flops == 48_928 + 4 * (3 * 16 * 8 + 3 * 16)
    with kernels_of("cpu"):
        for_a_cpu = estimate(on_meta, Float[Tensor, "b s d"], b=2, s=5, d=8, grad=("x",))
    assert for_a_cpu.backward_flops == 48_928


class _Ops(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: list[tuple[str, tuple[Any, ...]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        leaves = torch.utils._pytree.tree_leaves(args)
        self.ops.append((str(func), tuple(_seen(a) for a in leaves)))
        return out


def _seen(value: Any) -> Any:
    return tuple(value.shape) if isinstance(value, Tensor) else value


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(sorted(LAYERS)),
    layers=st.integers(1, 2),
    bidirectional=st.booleans(),
    batch_first=st.booleans(),
    bias=st.booleans(),
    dropout=st.sampled_from([0.0, 0.5]),
    projected=st.booleans(),
)
def test_the_stand_in_runs_the_cpus_ops_forward_and_backward(
    kind: str,
    layers: int,
    bidirectional: bool,
    batch_first: bool,
    bias: bool,
    dropout: float,
    projected: bool,
) -> None:
    """On real CPU tensors the stand-in runs torch's own op sequence, with its values."""
    projection = {"proj_size": 2} if projected and kind == "lstm" else {}
    options = {"num_layers": layers, "bidirectional": bidirectional, "bias": bias}
    rnn = layer(kind, 3, 4, batch_first=batch_first, dropout=dropout, **options, **projection)
    func = getattr(torch, kind)
    states = layers * (2 if bidirectional else 1)
    outer = 2 if batch_first else 5

    def run(call: Any) -> tuple[list[Any], list[Tensor]]:
        rnn.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        x = torch.randn(2, 5, 3, requires_grad=True)
        h = torch.zeros(states, outer, 2 if projection else 4)
        hx: Any = [h, torch.zeros(states, outer, 4)] if kind == "lstm" else h
        args = (x, hx, rnn._flat_weights, bias, layers, dropout, True, bidirectional)
        with _Ops() as ops:
            torch.manual_seed(1)
            outs = call(*args, batch_first)
            sum(out.sum() for out in outs).backward()
        assert x.grad is not None
        return ops.ops, [out.detach() for out in outs] + [x.grad]

    torch_ops, torch_values = run(func)
    our_ops, our_values = run(lambda *args: rnn_as_cpu(func, args, {}))
    assert our_ops == torch_ops
    for ours, theirs in zip(our_values, torch_values, strict=True):
        torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_a_record_on_meta_runs_the_targets_layer_as_an_estimate_does(
    kind: str, target: str
) -> None:
    with torch.device("meta"):
        rnn = layer(kind, 8, 16)
    x = torch.empty(5, 2, 8, device="meta", requires_grad=True)
    with kernels_of(target):
        with record() as rec:
            rnn(x)
        cost = estimate(rnn, Float[Tensor, "s b d"], s=5, b=2, d=8, grad=("input",))
    total = rec.total
    assert (total.flops, total.backward_flops) == (cost.flops, cost.backward_flops)
    on_meta = estimate(rnn, Float[Tensor, "s b d"], s=5, b=2, d=8, grad=("input",))
    assert cost.backward_flops < on_meta.backward_flops  # (no sums over the steps)
