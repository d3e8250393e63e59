"""The CPU's theoretical peak against what a matmul reaches, and how much each moves between
rounds.

The peak (cores in use x clock x FLOP/cycle, ``typedflops.devices.cpu_spec``) is computed,
not measured: it must be the same in every round and above every measured matmul (MFU <= 1).
The best fp32 matmul and the copy bandwidth are measured; their spread over rounds is what
the old measured peak suffered from. Prints, per thread count: the peak, the best matmul per
round, the ratio (an upper bound of MFU on this machine) and the measured bandwidth.

    python benchmarks/cpu_peak.py [--sizes 256 1024 2048] [--rounds 3] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from typedflops import devices
from typedflops.devices import cpu
from typedflops.text import format_percent, format_si, text_table


def best_matmul(n: int, runs: int = 10) -> float:
    """FLOP/s of the fastest of ``runs`` fp32 n x n matmuls (after 3 warm-up runs)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[torch.get_num_threads()])
    options = parser.parse_args()
    before = torch.get_num_threads()
    rows = []
    for threads in options.threads:
        torch.set_num_threads(threads)
        for round_ in range(1, options.rounds + 1):
            spec = devices.cpu_spec()
            peak = None if spec is None else spec.peak_flops.get(torch.float32)
            measured = max(best_matmul(n) for n in options.sizes)
            cpu.measured_bandwidth.cache_clear()  # a new measurement each round
            bandwidth = cpu.measured_bandwidth(threads)[0]
            rows.append(
                [
                    str(threads),
                    str(round_),
                    "unknown" if peak is None else format_si(peak, "FLOP/s"),
                    format_si(measured, "FLOP/s"),
                    "n/a" if peak is None else format_percent(measured / peak),
                    format_si(bandwidth, "B/s"),
                ]
            )
    torch.set_num_threads(before)
    header = ["threads", "round", "peak (theory)", "best matmul", "ratio", "copy (measured)"]
    print(text_table(header, rows, right={0, 1, 2, 3, 4, 5}))
    spec = devices.cpu_spec()
    if spec is not None:
        print(f"peak: {spec.source if spec.peak_flops else spec.missing}")


if __name__ == "__main__":
    main()
