"""Per-call overhead of ``typedflops.einsum`` against ``einops.einsum`` on small tensors.

Both run ``"batch d_in, d_in d_out -> batch d_out"`` on 8x16 and 16x4 float32 CPU tensors,
outside any ``record()`` (the hot path). Rounds alternate between the two so that clock
drift and noisy neighbours hit both alike; the script prints the median per-call time of
each and their ratio (target: at most 1.3).

Run: ``python benchmarks/einsum_overhead.py [--rounds 41] [--calls 2000]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import einops
import torch

from typedflops import einsum

PATTERN = "batch d_in, d_in d_out -> batch d_out"


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    """Mean microseconds per call over ``calls`` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--calls", type=int, default=2000)
    options = parser.parse_args()
    torch.set_num_threads(1)
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    assert torch.equal(einsum(x, w, PATTERN), einops.einsum(x, w, PATTERN))
    candidates: dict[str, Callable[[], object]] = {
        "einops.einsum": lambda: einops.einsum(x, w, PATTERN),
        "typedflops.einsum": lambda: einsum(x, w, PATTERN),
        "torch.einsum": lambda: torch.einsum("ab,bc->ac", x, w),
    }
    for fn in candidates.values():  # warm-up: caches, allocator, first-call costs
        per_call_us(fn, options.calls)
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(options.rounds):
        for name, fn in candidates.items():
            samples[name].append(per_call_us(fn, options.calls))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name, median in medians.items():
        print(f"{name:<18} {median:7.2f} us/call (median of {options.rounds} rounds)")
    ratio = medians["typedflops.einsum"] / medians["einops.einsum"]
    print(f"ratio typedflops/einops: {ratio:.3f} (target <= 1.3)")


if __name__ == "__main__":
    main()
