"""The linear model: FLOPs 2*B*D*K, time, FLOP/s and MFU.

Run: ``python examples/ex03_linear_model.py`` (add ``--quick`` for tiny sizes).
"""

from __future__ import annotations

import sys

import torch

from typedflops import benchmark
from typedflops.nn import Linear


def main(quick: bool = False) -> None:
    """Cost the linear model symbolically, then time it on this machine."""
    batch, d, k = (64, 32, 16) if quick else (1024, 256, 64)
    model = Linear(d, k)
    cost = model.estimate(batch=batch)
    print(f"Linear({d}, {k}) on a batch of {batch}: {cost.formula} = {cost.flops:,} FLOPs")
    assert cost.flops == 2 * batch * d * k
    x = torch.randn(batch, d)
    with torch.no_grad():
        measured = benchmark(model, x, repeat=5 if quick else 30)
    print(measured)
    if measured.mfu is not None:
        print(f"MFU {measured.mfu:.1%} of the promised {measured.peak_flop_per_sec:.3g} FLOP/s")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
