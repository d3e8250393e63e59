"""Per-call overhead of the runtime contract, measured side by side in one run.

Compares a plain call of ``x @ w`` (8x16 and 16x4 float32 tensors) with the same function
under ``jaxtyped(typechecker=beartype)``, under ``@typed_flops``, and under ``@typed_flops``
switched off with ``typedflops.disabled()``. Rounds are interleaved so that machine noise
hits every variant alike; medians are printed, then the ratio of overheads.

Run: ``python benchmarks/overhead.py``
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from beartype import beartype
from jaxtyping import Float, jaxtyped
from torch import Tensor

import typedflops


def plain(x: Tensor, w: Tensor) -> Tensor:
    return x @ w


@jaxtyped(typechecker=beartype)
def anchor(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    return x @ w


@typedflops.typed_flops
def ours(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    return x @ w


def _per_call_us(fn: Callable[[Tensor, Tensor], Tensor], x: Tensor, w: Tensor, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(x, w)
    return (time.perf_counter() - start) / calls * 1e6


def main(rounds: int = 30, calls: int = 2000) -> None:
    torch.set_num_threads(1)
    x, w = torch.randn(8, 16), torch.randn(16, 4)

    variants: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
        "plain": plain,
        "jaxtyped(beartype)": anchor,
        "@typed_flops": ours,
    }
    samples: dict[str, list[float]] = {name: [] for name in [*variants, "@typed_flops off"]}
    for fn in variants.values():
        _per_call_us(fn, x, w, 200)  # warm-up: first calls compile caches
    for _ in range(rounds):
        for name, fn in variants.items():
            samples[name].append(_per_call_us(fn, x, w, calls))
        with typedflops.disabled():
            samples["@typed_flops off"].append(_per_call_us(ours, x, w, calls))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base = medians["plain"]
    print(f"per call, x @ w on 8x16 and 16x4 float32 ({rounds} interleaved rounds of {calls})")
    for name, value in medians.items():
        print(f"  {name:<20} {value:7.2f} us   overhead {value - base:6.2f} us")
    ratio = (medians["@typed_flops"] - base) / (medians["jaxtyped(beartype)"] - base)
    print(f"overhead ratio @typed_flops / jaxtyped(beartype): {ratio:.3f}  (target <= 0.2)")
    print(f"disabled overhead: {medians['@typed_flops off'] - base:.2f} us  (target <= 0.5)")


if __name__ == "__main__":
    main()
