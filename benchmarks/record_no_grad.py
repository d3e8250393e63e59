"""What ``record()`` costs on a model run under ``torch.no_grad()`` (inference).

Ops run with autograd off may run inside a ``torch.autograd.Function``'s forward, whose
inputs ``record()`` then reads off the Function's call (see
``typedflops.cost.engine.function_inputs``); a record asks for each such op while a tensor
it made waits for its readers (an output that needs grad, held). This measures what asking
costs where no Function runs: 20 forwards of a 20-block Linear-GELU-LayerNorm MLP (batch 8,
width 64, float32, CPU, 1 thread; 1,600 ops) under ``torch.no_grad()``, plain, inside one
``record()``, and inside one ``record()`` that holds the output of a forward with autograd
on (an evaluation after a training step's forward: every op asks), and under
``torch.inference_mode()`` inside one ``record()`` (medians of interleaved rounds, so that
machine noise hits every variant alike).

Run: ``python benchmarks/record_no_grad.py`` (``--quick`` for fewer rounds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from typedflops import record


def mlp(blocks: int = 20, width: int = 64) -> nn.Module:
    """``blocks`` of Linear, GELU, LayerNorm."""
    layers: list[nn.Module] = []
    for _ in range(blocks):
        layers += [nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width)]
    return nn.Sequential(*layers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    rounds = 5 if parser.parse_args().quick else 15
    torch.set_num_threads(1)
    model = mlp()
    x = torch.randn(8, 64)

    def forwards() -> None:
        for _ in range(20):
            model(x)

    def plain() -> None:
        with torch.no_grad():
            forwards()

    def recorded() -> None:
        with torch.no_grad(), record():
            forwards()

    def after_forward() -> None:
        with record():
            held = model(x)
            with torch.no_grad():
                forwards()
            del held

    def inference() -> None:
        with torch.inference_mode(), record():
            forwards()

    with torch.no_grad(), record():  # (the first record loads what counting needs)
        forwards()
    cases: dict[str, Callable[[], None]] = {
        "plain": plain,
        "recorded": recorded,
        "held": after_forward,
        "inference": inference,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, run in cases.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    print(f"20 forwards of a 20-block MLP under no_grad (1,600 ops), median of {rounds}:")
    for name, values in times.items():
        print(f"  {name:<10} {statistics.median(values) * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
