"""Bytes of kernels whose bookkeeping outputs differ between a CPU, a GPU and ``meta``.

``nn.EmbeddingBag`` (weight V x D, N indices in B bags) writes its output (B x D float32)
and int64 bookkeeping: a CPU keeps no bag per index on its ``sum`` fast path (float32
weights, no padding index) and a bag per index otherwise (N), a size per bag (B), and an
index of the maximum per bag (B; B x D for ``max``); a GPU keeps a bag per index (N), a size
per bag (B) and no index of a maximum outside ``max``. Torch's meta kernel gives a GPU's; a
dry run for a CPU gives a CPU's, as the record of a CPU run counts them.
"""

from __future__ import annotations

import pytest
import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from typedflops import estimate, record
from typedflops.cost.engine.kernels import kernels_of

V, D, N, B = 100, 8, 10, 3
OUTPUT = B * D * 4


def _cpu_bytes(mode: str, padding: bool) -> int:
    per_index = 0 if mode == "sum" and not padding else 8 * N
    maximum = 8 * B * D if mode == "max" else 8 * B
    return OUTPUT + per_index + 8 * B + maximum


def _gpu_bytes(mode: str) -> int:
    return OUTPUT + 8 * N + 8 * B + (8 * B * D if mode == "max" else 0)


class Bags(nn.Module):
    def __init__(self, mode: str, padding: bool) -> None:
        super().__init__()
        self.bags = nn.EmbeddingBag(V, D, mode=mode, padding_idx=0 if padding else None)

    def forward(self, indices: Tensor, offsets: Tensor) -> Tensor:
        out: Tensor = self.bags(indices, offsets)
        return out


CASES = [("sum", False), ("sum", True), ("mean", False), ("max", False)]


@pytest.mark.parametrize(("mode", "padding"), CASES)
@pytest.mark.parametrize("grad", [True, False])
def test_a_cpu_models_estimate_writes_what_its_record_writes(
    mode: str, padding: bool, grad: bool
) -> None:
    model = Bags(mode, padding)
    indices, offsets = torch.randint(1, V, (N,)), torch.tensor([0, 3, 7])
    with torch.set_grad_enabled(grad):
        cost = estimate(model, Int[Tensor, "n"], Int[Tensor, "b"], n=N, b=B)
        with record() as rec:
            model(indices, offsets)
    assert rec.total.bytes_written == cost.bytes_written == _cpu_bytes(mode, padding)
    assert rec.total.flops == cost.flops


@pytest.mark.parametrize(("mode", "padding"), CASES)
def test_a_meta_model_writes_what_the_device_it_stands_for_writes(mode: str, padding: bool) -> None:
    model = Bags(mode, padding).to("meta")
    indices = torch.zeros(N, dtype=torch.long, device="meta")
    offsets = torch.zeros(B, dtype=torch.long, device="meta")
    found = {}
    # (a GPU's first, then a CPU's, then a GPU's again: nothing kept from one to the next)
    for device in ("cuda", "cpu", "cuda"):
        with kernels_of(device):
            cost = estimate(model, Int[Tensor, "n"], Int[Tensor, "b"], n=N, b=B)
            with record() as rec:
                model(indices, offsets)
        assert rec.total.bytes_written == cost.bytes_written
        found[device] = cost.bytes_written
    assert found == {"cuda": _gpu_bytes(mode), "cpu": _cpu_bytes(mode, padding)}


def test_per_sample_weights_keep_the_cpus_fast_path_and_their_gradient() -> None:
    model = Bags("sum", False)
    cost = estimate(
        lambda i, o, w: model.bags(i, o, per_sample_weights=w).sum(),
        Int[Tensor, "n"],
        Int[Tensor, "b"],
        Float[Tensor, "n"],
        n=N,
        b=B,
        grad=["w"],
    )
    indices, offsets = torch.randint(1, V, (N,)), torch.tensor([0, 3, 7])
    weights = torch.randn(N, requires_grad=True)
    with record() as rec:
        model.bags(indices, offsets, per_sample_weights=weights).sum()
    assert cost.bytes_written == rec.total.bytes_written == _cpu_bytes("sum", False) + 4
    assert cost.flops == rec.total.flops
    assert cost.backward_flops == rec.total.backward_flops


# Norms on float16 and bfloat16 inputs keep their statistics (a mean and an inverse deviation
# per row of a layer norm, per channel of a batch norm in training) at float32 on a GPU and
# on meta, at the input's dtype on a CPU (float32 there too where a parameter is float32).
ROWS, WIDTH = 6, 8


class Norms(nn.Module):
    def __init__(self, dtype: torch.dtype, params: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.layer = nn.LayerNorm(WIDTH).to(params)
        self.batch = nn.BatchNorm1d(WIDTH).to(params)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.batch(self.layer(x.to(self.dtype)))
        return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mixed", [False, True])
def test_norms_keep_their_statistics_at_the_dtype_each_device_keeps(
    dtype: torch.dtype, mixed: bool
) -> None:
    model = Norms(dtype, torch.float32 if mixed else dtype)
    x = torch.randn(ROWS, WIDTH)
    with record() as rec:
        model(x)
    cost = estimate(model, Float[Tensor, "rows width"], rows=ROWS, width=WIDTH)
    assert cost.bytes_written == rec.total.bytes_written
    assert cost.bytes_read == rec.total.bytes_read
    meta = Norms(dtype, torch.float32 if mixed else dtype).to("meta")
    with kernels_of("cuda"):
        gpu = estimate(meta, Float[Tensor, "rows width"], rows=ROWS, width=WIDTH)
    with kernels_of("cpu"):
        cpu = estimate(meta, Float[Tensor, "rows width"], rows=ROWS, width=WIDTH)
    assert cpu.bytes_written == cost.bytes_written
    # float32 statistics: 2 bytes more for each of two per row and two per channel
    assert gpu.bytes_written - cpu.bytes_written == (0 if mixed else 2 * 2 * (ROWS + WIDTH))
