"""One thing, one count: ``estimate()`` on meta and ``record()`` of a real CPU run of the
same call agree where torch's CPU kernels differ from meta's (attention called inside a
torch function written in Python, as ``nn.MultiheadAttention`` calls it)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn

import typedflops
from typedflops import record
from typedflops.cost.engine.kernels import kernels_of


class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.attn(x, x, x, need_weights=False)[0]
        return out


def _recorded(model: nn.Module, x: Tensor) -> tuple[int, int]:
    with record() as rec:
        model(x)
    return rec.total.flops, rec.total.backward_flops


def test_multihead_attention_is_costed_on_the_cpu_kernel() -> None:
    model = SelfAttention(8, 2)
    cost = typedflops.estimate(model, Float[Tensor, "batch seq d"], batch=2, seq=5, d=8)
    assert cost.flops == 6960  # meta's math attention gave 7,620
    assert _recorded(model, torch.randn(2, 5, 8)) == (cost.flops, cost.backward_flops)


def test_encoder_layer_is_costed_on_the_cpu_kernel() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0)
    cost = typedflops.estimate(layer, Float[Tensor, "batch seq d"], batch=2, seq=5, d=8)
    assert cost.flops == 13520  # meta's math attention gave 14,180
    assert _recorded(layer, torch.randn(2, 5, 8)) == (cost.flops, cost.backward_flops)


@settings(max_examples=6, deadline=None)
@given(
    batch=st.integers(1, 3),
    seq=st.integers(1, 6),
    heads=st.sampled_from([1, 2, 4]),
    grad=st.booleans(),
)
def test_estimate_and_record_agree_on_attention(
    batch: int, seq: int, heads: int, grad: bool
) -> None:
    model = SelfAttention(8, heads)
    with torch.set_grad_enabled(grad):
        cost = typedflops.estimate(model, Float[Tensor, "b s d"], b=batch, s=seq, d=8)
        flops, _ = _recorded(model, torch.randn(batch, seq, 8))
    assert flops == cost.flops


def test_a_model_on_meta_costed_for_a_cpu_runs_the_cpu_kernel_inside_multihead_attention() -> None:
    """``nn.MultiheadAttention`` built on meta, inside ``kernels_of("cpu")``: its
    estimate and a record on meta count the CPU's attention kernel, as a real CPU run's
    record does (the record on meta handed the torch function to itself without end)."""
    with torch.device("meta"):
        on_meta = SelfAttention(8, 2)
    with kernels_of("cpu"):
        cost = typedflops.estimate(on_meta, Float[Tensor, "batch seq d"], batch=2, seq=5, d=8)
        with record() as rec:
            on_meta(torch.empty(2, 5, 8, device="meta"))
    assert cost.flops == 6960  # meta's math attention gave 7,620
    assert (rec.total.flops, rec.total.backward_flops) == (cost.flops, cost.backward_flops)
    assert _recorded(SelfAttention(8, 2), torch.randn(2, 5, 8)) == (cost.flops, cost.backward_flops)
