"""Per-call overhead of the runtime contract and of ``typedflops.einsum``, side by side.

Two measurements in one run, each with its variants interleaved round by round (in turn
forward and backward, so that no variant always runs first) so that machine noise hits every
variant alike; medians are printed, then the ratios, with the load average before and after.
An overhead is the median, over rounds, of a variant's time minus the plain call's in the
same round (a paired difference: load that changes between rounds cancels), with quartiles.
Times are this thread's CPU time (``--clock wall`` for wall time): on a shared machine, the
time the scheduler gives other processes is not counted.

- ``x @ w`` (8x16 and 16x4 float32 tensors): a plain call, the same function under
  ``jaxtyped(typechecker=beartype)``, under ``@typed_flops``, and under ``@typed_flops``
  switched off with ``typedflops.disabled()``, beside an object whose ``__call__`` only
  hands its arguments on (the least any decorated callable adds). Targets: a checked
  call's overhead at most 0.10x of jaxtyped(beartype)'s; switched off, at most 0.3 µs over
  a plain call.
- ``"batch d_in, d_in d_out -> batch d_out"`` on the same tensors, outside any
  ``record()``: ``einops.einsum`` against ``typedflops.einsum`` (and ``torch.einsum`` for
  scale, and torch's einsum kernel called with no Python wrapper: what each adds to it).
  Target: at most 1.05x einops' time.

Run: ``python benchmarks/overhead.py [--rounds 30] [--calls 2000] [--clock cpu|wall]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import einops
import torch
from beartype import beartype
from jaxtyping import Float, jaxtyped
from torch import Tensor

import typedflops

PATTERN = "batch d_in, d_in d_out -> batch d_out"


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


class Forwarding:
    """The least a callable object can do: its ``__call__`` hands the arguments on."""

    def __call__(self, *args: Tensor, **kwargs: Tensor) -> Tensor:
        return plain(*args, **kwargs) if kwargs else plain(*args)


Clock = Callable[[], float]


def _per_call_us(
    fn: Callable[[Tensor, Tensor], object], x: Tensor, w: Tensor, calls: int, clock: Clock
) -> float:
    start = clock()
    for _ in range(calls):
        fn(x, w)
    return (clock() - start) / calls * 1e6


def _samples(
    variants: dict[str, Callable[[Tensor, Tensor], object]],
    x: Tensor,
    w: Tensor,
    rounds: int,
    calls: int,
    clock: Clock,
) -> dict[str, list[float]]:
    """Per-call times of each variant, one sample a round, all variants in every round."""
    for fn in variants.values():
        _per_call_us(fn, x, w, 200, clock)  # warm-up: first calls compile caches
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for number in range(rounds):
        ordered = list(variants.items())
        for name, fn in ordered if number % 2 else reversed(ordered):
            if name.endswith(" off"):
                with typedflops.disabled():
                    samples[name].append(_per_call_us(fn, x, w, calls, clock))
            else:
                samples[name].append(_per_call_us(fn, x, w, calls, clock))
    return samples


def _over(samples: dict[str, list[float]], name: str, base: str) -> tuple[float, float, float]:
    """The median of a variant's time over the base's, round by round (each round measures
    both within milliseconds, so load that changes between rounds cancels), and its
    quartiles."""
    differences = [a - b for a, b in zip(samples[name], samples[base], strict=True)]
    low, middle, high = statistics.quantiles(differences, n=4)
    return middle, low, high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    options = parser.parse_args()
    clock = time.thread_time if options.clock == "cpu" else time.perf_counter
    print(f"load average {_load()} ({os.cpu_count()} cores), {options.clock} time")
    torch.set_num_threads(1)
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    assert torch.equal(typedflops.einsum(x, w, PATTERN), einops.einsum(x, w, PATTERN))

    check_samples = _samples(
        {
            "plain": plain,
            "jaxtyped(beartype)": anchor,
            "@typed_flops": ours,
            "@typed_flops off": ours,
            "forwarding object": Forwarding(),
        },
        x,
        w,
        options.rounds,
        options.calls,
        clock,
    )
    print(
        f"per call, x @ w on 8x16 and 16x4 float32 ({options.rounds} interleaved rounds of "
        f"{options.calls}); overhead: the median, round by round, of the time over the plain "
        "call's in the same round [quartiles]"
    )
    over = {name: _over(check_samples, name, "plain") for name in check_samples}
    for name, values in check_samples.items():
        middle, low, high = over[name]
        print(
            f"  {name:<20} {statistics.median(values):7.2f} us   "
            f"overhead {middle:6.2f} us [{low:.2f}, {high:.2f}]"
        )
    ratio = over["@typed_flops"][0] / over["jaxtyped(beartype)"][0]
    print(f"overhead ratio @typed_flops / jaxtyped(beartype): {ratio:.3f}  (target <= 0.10)")
    print(
        f"disabled overhead: {over['@typed_flops off'][0]:.2f} us  (target <= 0.3); "
        f"an object whose __call__ only hands its arguments on: "
        f"{over['forwarding object'][0]:.2f} us"
    )

    kernel = torch._VF.einsum  # type: ignore[attr-defined]  # torch.einsum's call for 1-2 operands
    sum_samples = _samples(
        {
            "einops.einsum": lambda a, b: einops.einsum(a, b, PATTERN),
            "typedflops.einsum": lambda a, b: typedflops.einsum(a, b, PATTERN),
            "torch.einsum": lambda a, b: torch.einsum("ab,bc->ac", a, b),
            "kernel": lambda a, b: kernel("ab,bc->ac", (a, b)),
        },
        x,
        w,
        options.rounds,
        options.calls,
        clock,
    )
    sums = {name: statistics.median(values) for name, values in sum_samples.items()}
    print(f'per call, einsum "{PATTERN}" on the same tensors ("kernel": torch._VF.einsum)')
    for name, value in sums.items():
        print(f"  {name:<20} {value:7.2f} us")
    einsum_ratio = sums["typedflops.einsum"] / sums["einops.einsum"]
    print(f"ratio typedflops.einsum / einops.einsum: {einsum_ratio:.3f}  (target <= 1.05)")
    kernel_time = sums["kernel"]
    print(
        f"over the kernel: typedflops.einsum {sums['typedflops.einsum'] - kernel_time:.2f} us, "
        f"einops.einsum {sums['einops.einsum'] - kernel_time:.2f} us, "
        f"torch.einsum {sums['torch.einsum'] - kernel_time:.2f} us"
    )
    print(f"load average {_load()}")


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    main()
