"""Accuracy of ``typedflops.benchmark``: its median against ``torch.utils.benchmark.Timer``'s.

Both time the same fp32 matmul at the same thread count on the CPU, without cache flushes,
in interleaved rounds (ours then Timer's, then the other way round) so that drift and noisy
neighbours hit both. Prints the medians over rounds and their ratio; target: within +-10%
on a quiet machine.

With ``--device cuda`` both time a bfloat16 matmul on the GPU: ours (CUDA events, L2 flushed
before each run) against ``triton.testing.do_bench``'s median, which also flushes the L2 and
times with events, and against ``Timer`` (synchronised wall time, no flush); the MFU column is
ours against the device table's dense bf16 peak.

    python benchmarks/timing.py [--sizes 256 512 1024 2048] [--rounds 6] [--min-time 0.2]
                                [--threads N]   (default: torch's current thread count)
    python benchmarks/timing.py --device cuda --sizes 1024 4096 8192
"""

from __future__ import annotations

import argparse
import importlib
import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.benchmark as torch_benchmark

import typedflops


def ours(a: torch.Tensor, b: torch.Tensor, min_time: float) -> float:
    return typedflops.benchmark(torch.matmul, a, b, min_time=min_time, peak=1e18).median


def bench_seconds(do_bench: Any, a: torch.Tensor, b: torch.Tensor) -> float:
    """``triton.testing.do_bench``'s median of ``a @ b`` in seconds (it reports ms)."""
    return float(do_bench(lambda: torch.matmul(a, b), return_mode="median")) / 1e3


def cuda_main(sizes: list[int], rounds: int, min_time: float) -> None:
    """Ours against triton's ``do_bench`` and ``Timer`` on a bfloat16 matmul on the GPU."""
    do_bench = importlib.import_module("triton.testing").do_bench
    peak = typedflops.devices.peak_flops(torch.bfloat16, "cuda") or float("nan")
    torch.manual_seed(0)
    print(f"bf16 matmul on {torch.cuda.get_device_name()}, {rounds} interleaved rounds")
    print(f"{'n':>6} {'ours (ms)':>10} {'do_bench':>9} {'Timer':>9} {'ours/db':>8} {'MFU':>6}")
    for n in sizes:
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        timers: dict[str, Callable[[torch.Tensor, torch.Tensor], float]] = {
            "ours": lambda x, y: ours(x, y, min_time),
            "do_bench": lambda x, y: bench_seconds(do_bench, x, y),
            "Timer": lambda x, y: theirs(x, y, min_time, torch.get_num_threads()),
        }
        seconds: dict[str, list[float]] = {name: [] for name in timers}
        for round_index in range(rounds):
            order = list(timers) if round_index % 2 == 0 else list(timers)[::-1]
            for name in order:
                seconds[name].append(timers[name](a, b))
        m, d, t = (statistics.median(seconds[name]) for name in ("ours", "do_bench", "Timer"))
        print(
            f"{n:>6} {m * 1e3:>10.4f} {d * 1e3:>9.4f} {t * 1e3:>9.4f} {m / d:>8.3f} "
            f"{2 * n**3 / m / peak:>6.1%}"
        )


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
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    options = parser.parse_args()
    if options.device == "cuda":
        cuda_main(options.sizes, options.rounds, options.min_time)
        return
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
