"""Accuracy of ``typedflops.benchmark``: its median against ``torch.utils.benchmark.Timer``'s.

Both time the same fp32 matmul at the same thread count on the CPU, without cache flushes,
in interleaved rounds (ours then Timer's, then the other way round) so that drift and noisy
neighbours hit both. Prints the medians over rounds and their ratio; target: within +-10%
on a quiet machine.

    python benchmarks/timing.py [--sizes 256 512 1024 2048] [--rounds 6] [--min-time 0.2]
                                [--threads N]   (default: torch's current thread count)
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.utils.benchmark as torch_benchmark

import typedflops


def ours(a: torch.Tensor, b: torch.Tensor, min_time: float) -> float:
    return typedflops.benchmark(torch.matmul, a, b, min_time=min_time, peak=1e18).median


def theirs(a: torch.Tensor, b: torch.Tensor, min_time: float, threads: int) -> float:
    timer = torch_benchmark.Timer(
        stmt="torch.matmul(a, b)", globals={"torch": torch, "a": a, "b": b}, num_threads=threads
    )
    return float(timer.blocked_autorange(min_run_time=min_time).median)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--min-time", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    inputs = {n: (torch.randn(n, n), torch.randn(n, n)) for n in options.sizes}
    size_to_ours: dict[int, list[float]] = {n: [] for n in options.sizes}
    size_to_theirs: dict[int, list[float]] = {n: [] for n in options.sizes}
    for round_index in range(options.rounds):
        for n in options.sizes:
            a, b = inputs[n]
            if round_index % 2 == 0:
                size_to_ours[n].append(ours(a, b, options.min_time))
                size_to_theirs[n].append(theirs(a, b, options.min_time, threads))
            else:
                size_to_theirs[n].append(theirs(a, b, options.min_time, threads))
                size_to_ours[n].append(ours(a, b, options.min_time))

    print(f"fp32 matmul on CPU, {threads} threads, {options.rounds} interleaved rounds")
    print(f"{'n':>6} {'ours (ms)':>10} {'Timer (ms)':>11} {'ratio':>7} {'GFLOP/s':>8}  per round")
    for n in options.sizes:
        mine, reference = statistics.median(size_to_ours[n]), statistics.median(size_to_theirs[n])
        per_round = " ".join(
            f"{o / t:.2f}" for o, t in zip(size_to_ours[n], size_to_theirs[n], strict=True)
        )
        print(
            f"{n:>6} {mine * 1e3:>10.3f} {reference * 1e3:>11.3f} {mine / reference:>7.3f} "
            f"{2 * n**3 / mine / 1e9:>8.1f}  {per_round}"
        )


if __name__ == "__main__":
    main()
