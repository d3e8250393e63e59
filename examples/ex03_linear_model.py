"""The linear model: FLOPs 2*B*D*K, time, FLOP/s and MFU.

Run: ``python examples/ex03_linear_model.py`` (add ``--quick`` for tiny sizes).
"""

from __future__ import annotations

import sys

import torch

from typedflops import benchmark
from typedflops.nn import Linear
from typedflops.text import format_percent, format_si


def main(quick: bool = False) -> None:
    """Cost the linear model symbolically, then time it on this machine."""
    batch, d, k = (64, 32, 16) if quick else (1024, 256, 64)
    model = Linear(d, k)
    cost = model.estimate(batch=batch)
    flops = format_si(cost.flops, "FLOP")
    print(f"Linear({d}, {k}) on a batch of {batch}: {cost.formula} = {flops} ({cost.flops:,})")
    assert cost.flops == 2 * batch * d * k
    x = torch.randn(batch, d)
    with torch.no_grad():
        measured = benchmark(model, x, repeat=5 if quick else 30)
    print(measured)
    if measured.mfu is not None and measured.peak_flop_per_sec is not None:
        peak = format_si(measured.peak_flop_per_sec, "FLOP/s")
        print(f"MFU {format_percent(measured.mfu)} of the peak {peak}")
    else:
        print("MFU n/a: no peak for this device (see `typedflops devices`)")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
