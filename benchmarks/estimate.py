"""How long a dry run takes at the lecture's GPU sizes, and that it allocates nothing.

``TwoLayerMLP(32768, 32768, 8192)`` built on ``meta`` and estimated at batch 16384 (its
forward is 4.398e13 FLOPs). Prints the median of repeated estimates (target < 20 ms) and the
process's peak resident memory before and after (a real run would need ~5.4 GB of weights).

Run: ``python benchmarks/estimate.py``
"""

from __future__ import annotations

import resource
import statistics
import time

from typedflops.nn import TwoLayerMLP


def main(rounds: int = 30) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model = TwoLayerMLP(32768, 32768, 8192, device="meta")
    model.estimate(batch=16384)  # the first run fills the caches (parse, contract, sympy)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        cost = model.estimate(batch=16384)
        times.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"TwoLayerMLP(32768, 32768, 8192).estimate(batch=16384): {cost.flops:.4g} FLOPs "
        f"forward, {cost.backward_flops:.4g} backward, formula {cost.formula}"
    )
    print(
        f"median {statistics.median(times) * 1e3:.2f} ms, min {min(times) * 1e3:.2f} ms "
        f"over {rounds} runs (target < 20 ms)"
    )
    print(f"peak resident memory {before / 1024:.0f} MiB before, {after / 1024:.0f} MiB after")


if __name__ == "__main__":
    main()
