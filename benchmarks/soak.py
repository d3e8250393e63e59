"""Soak: many checked and recorded calls, from one thread and from eight, measured side by side.

Prints, for a small two-matmul function (8x16 @ 16x16 @ 16x4, float32, CPU):

- time per call unchecked, checked, checked inside ``record()``, and checked under a
  dispatch mode that does nothing (interleaved rounds, so the ratios are measured under the
  same load; the CPU time of the calling thread, which other processes on a shared machine
  do not enter, with wall time beside it): ``record()`` counts each op of the body as it
  runs, in a dispatch mode, so the floor's ratio to a checked call is what torch's round
  trip to Python costs on these small ops before anything is counted;
- the growth of resident memory over 1e5 checked calls and over 1e4 recorded calls (every
  call is counted as it ran; calls that did the same work share a row, so a recording keeps
  memory per distinct work, not per call);
- the same with 8 threads calling at once, each in its own ``record()``.

Run: ``python benchmarks/soak.py`` (``--quick`` for 10x fewer calls).
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from typedflops import record, typed_flops


def plain(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
    return torch.relu(x @ w1) @ w2


@typed_flops
def checked(
    x: Float[Tensor, "batch d"], w1: Float[Tensor, "d h"], w2: Float[Tensor, "h k"]
) -> Float[Tensor, "batch k"]:
    return torch.relu(x @ w1) @ w2


class PassThrough(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """A dispatch mode that runs each op and does nothing else."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def per_call(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def cpu_per_call(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """CPU time of this thread per call (what other processes on a shared machine do not
    enter), and wall time per call."""
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - cpu) / calls, (time.perf_counter() - wall) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x fewer calls")
    scale = 10 if parser.parse_args().quick else 1
    torch.set_num_threads(1)
    x, w1, w2 = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 4)

    def run_plain() -> object:
        return plain(x, w1, w2)

    def run_checked() -> object:
        return checked(x, w1, w2)

    with record() as warm:
        run_checked()
    assert warm.total.flops > 0

    rounds = 20
    names = ("plain", "checked", "recorded", "floor")
    cpu: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}

    def measure(name: str, fn: Callable[[], object]) -> None:
        spent, elapsed = cpu_per_call(fn, calls)
        cpu[name].append(spent)
        wall[name].append(elapsed)

    calls = 500 // scale or 1
    with record() as rec:
        run_checked()  # the first record loads what counting needs: not part of a figure
    for _ in range(rounds):
        measure("plain", run_plain)
        measure("checked", run_checked)
        with record() as rec:
            run_checked()
            measure("recorded", run_checked)
        with PassThrough():  # type: ignore[no-untyped-call]
            measure("floor", run_checked)
    medians = {name: statistics.median(values) * 1e6 for name, values in cpu.items()}
    walls = {name: statistics.median(values) * 1e6 for name, values in wall.items()}
    print("per call (median of 20 rounds, 1 thread): CPU time of the thread, wall time")
    for name, value in medians.items():
        print(f"  {name:<9} {value:8.2f} us {walls[name]:8.2f} us")
    print(
        f"recorded / checked: {medians['recorded'] / medians['checked']:.2f} (target <= 3; "
        f"wall {walls['recorded'] / walls['checked']:.2f})"
    )
    print(
        f"floor / checked:    {medians['floor'] / medians['checked']:.2f} (no counting at all; "
        f"wall {walls['floor'] / walls['checked']:.2f})"
    )
    print(f"rows kept for {calls + 1} recorded calls: {len(rec.calls)}")

    gc.collect()
    before = rss_mib()
    per = per_call(run_checked, 100_000 // scale)
    print(f"1e5 checked calls: {per * 1e6:.2f} us each, peak RSS +{rss_mib() - before:.1f} MiB")

    gc.collect()
    before = rss_mib()
    with record() as soak:
        per = per_call(run_checked, 10_000 // scale)
    print(
        f"1e4 recorded calls: {per * 1e6:.2f} us each, peak RSS +{rss_mib() - before:.1f} MiB, "
        f"{len(soak.calls)} row(s), {soak.calls[0].calls} calls counted, "
        f"total {soak.total.flops:.3g} FLOPs"
    )

    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with record() as mine:
                for _ in range(10_000 // scale // 8):
                    run_checked()
            assert mine.calls[0].calls == 10_000 // scale // 8
        except BaseException as exc:
            errors.append(exc)

    gc.collect()
    before = rss_mib()
    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    each = elapsed / (10_000 // scale) * 1e6
    print(
        f"8 threads x {10_000 // scale // 8} recorded calls: {each:.2f} us per call overall, "
        f"peak RSS +{rss_mib() - before:.1f} MiB, errors: {len(errors)}"
    )


if __name__ == "__main__":
    main()
