"""A record counts the user's work only: typedflops' own work run inside the block (the
dry runs of ``estimate()`` and of a benchmark's cost, building their inputs and modules on
``meta``; the CPU's bandwidth measurement a benchmark's figures read) adds nothing to it.

Hand counts: ``x @ w`` with ``x`` 8x16 and ``w`` 16x4 in float32 is 2·8·16·4 = 1,024 FLOPs,
reading 512 + 256 bytes and writing 128.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

import typedflops
from typedflops import record, typed_flops
from typedflops.devices.cpu import measured_bandwidth

X = torch.randn(8, 16)
W = torch.randn(16, 4)


@typed_flops
def product(x: Float[Tensor, "b d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "b k"]:
    return x @ w


def _counts(rec: typedflops.Recorder) -> tuple[int, int, int]:
    total = rec.total
    return total.flops, total.bytes_read, total.bytes_written


def test_an_estimate_inside_a_record_adds_nothing_to_it() -> None:
    with record() as rec:
        product(X, W)
        cost = product.estimate(b=64, d=32, k=8)
        typedflops.estimate(product, Float[Tensor, "b d"], Float[Tensor, "d k"], b=4, d=2, k=2)
    assert cost.flops == 2 * 64 * 32 * 8
    assert _counts(rec) == (1024, 768, 128)
    assert [op.op for op in rec.total.ops] == ["matmul"]


def test_a_benchmark_inside_a_record_is_one_call() -> None:
    with record() as rec:
        typedflops.benchmark(product, X, W, warmup=1, repeat=3, flush_l2=False, peak=1e12)
    assert _counts(rec) == (1024, 768, 128)
    assert [row.function for row in rec.calls] == ["product"]


def test_the_cpus_bandwidth_is_measured_on_the_cpu_unseen() -> None:
    with record() as rec, torch.device("meta"):
        bandwidth, copied = measured_bandwidth.__wrapped__(1)
    assert _counts(rec) == (0, 0, 0)
    assert copied >= 32 << 20
    assert 1e8 < bandwidth < 1e13  # (a copy on meta takes no time: petabytes per second)
