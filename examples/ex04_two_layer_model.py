"""The two-layer model: forward and backward FLOPs, and the 6 x tokens x parameters rule.

Run: ``python examples/ex04_two_layer_model.py``
"""

from __future__ import annotations

import sys

import torch

from typedflops.nn import TwoLayerMLP
from typedflops.text import format_si, text_table


def main(quick: bool = False) -> None:
    """Cost the lecture's ``TwoLayerMLP(D, D, K)`` forward and backward, then check by autograd."""
    batch, d, k = (64, 32, 16) if quick else (1024, 256, 64)
    model = TwoLayerMLP(d, d, k)
    cost = model.estimate(batch=batch)
    total = cost.flops + cost.backward_flops
    rule = 6 * batch * model.param_count
    rows: list[tuple[str, str, int]] = [
        ("forward", str(cost.formula), cost.flops),
        ("backward (x needs no grad)", str(cost.backward_formula), cost.backward_flops),
        ("forward + backward", "", total),
        ("6 x tokens x params", "", rule),
    ]
    print(
        text_table(
            ["pass", "formula", "FLOPs", "exact"],
            [[name, formula, format_si(n, "FLOP"), f"{n:,}"] for name, formula, n in rows],
            right={2, 3},
        )
    )
    print(f"ratio {total / rule:.3f}: the input's gradient is not needed")

    # The same count from torch's own counter, on a real forward and backward pass.
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(batch, d)
    with FlopCounterMode(display=False) as counter:
        model(x).pow(2).mean().backward()
    print(f"FlopCounterMode: {counter.get_total_flops():,} (the same)")
    assert counter.get_total_flops() == total

    # At the lecture's GPU sizes, a dry run on meta tensors: nothing is allocated.
    big = TwoLayerMLP(32768, 32768, 8192, device="meta")
    forward = format_si(big.estimate(batch=16384).flops, "FLOP")
    print(f"B=16384, D=32768, K=8192: forward {forward}")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
