"""Arithmetic intensity of ReLU, GELU, dot product, matrix-vector and matrix-matrix products,
placed on the current device's roofline.

Run: ``python examples/ex05_intensity_roofline.py``
"""

from __future__ import annotations

import sys

import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import Cost, einsum, typed_flops
from typedflops.roofline import roofline
from typedflops.text import format_si, text_table


@typed_flops
def relu(x: Float[Tensor, "n m"]) -> Float[Tensor, "n m"]:
    """Elementwise ``max(x, 0)``: one compare per element."""
    return torch.relu(x)


@typed_flops
def gelu(x: Float[Tensor, "n m"]) -> Float[Tensor, "n m"]:
    """Elementwise GELU."""
    return torch.nn.functional.gelu(x)


@typed_flops
def dot(x: Float[Tensor, " n"], y: Float[Tensor, " n"]) -> Float[Tensor, ""]:
    """``sum_i x_i y_i``: 2n FLOPs over 2n elements read."""
    return einsum(x, y, "n, n ->")


@typed_flops
def matvec(a: Float[Tensor, "n m"], x: Float[Tensor, " m"]) -> Float[Tensor, " n"]:
    """``A x``: about 2 FLOPs per element of ``A`` read."""
    return einsum(a, x, "n m, m -> n")


@typed_flops
def matmul(a: Float[Tensor, "n k"], b: Float[Tensor, "k m"]) -> Float[Tensor, "n m"]:
    """``A B``: intensity grows with the sizes."""
    return einsum(a, b, "n k, k m -> n m")


def costs(n: int) -> dict[str, Cost]:
    """The cost of each kernel at size ``n`` (square operands), from dry runs."""
    return {
        "relu": relu.estimate(n=n, m=n),
        "gelu": gelu.estimate(n=n, m=n),
        "dot": dot.estimate(n=n * n),
        "matvec": matvec.estimate(n=n, m=n),
        "matmul": matmul.estimate(n=n, k=n, m=n),
    }


def main(quick: bool = False) -> None:
    """Print intensity, formula and, where the device's roofs are known, the bound."""
    n = 256 if quick else 4096
    roof = roofline(torch.float32)
    if roof is None:
        print("no roofline for this device (see `typedflops devices`)")
    else:
        print(
            f"float32 roofline: peak {format_si(roof.peak_flop_per_sec, 'FLOP/s')}, bandwidth "
            f"{format_si(roof.bandwidth, 'B/s')}, ridge {roof.ridge:.3g} FLOP/B"
        )
    rows = [
        [
            name,
            f"{cost.intensity:.3g}",
            str(cost.formula),
            "n/a" if roof is None else roof.bound(cost.intensity),
        ]
        for name, cost in costs(n).items()
    ]
    print(text_table(["kernel", "FLOP/B", "FLOPs", "bound"], rows, right={1}))


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
