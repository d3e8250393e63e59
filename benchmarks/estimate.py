"""How long a dry run takes at GPU sizes, and that it allocates nothing.

- ``TwoLayerMLP(32768, 32768, 8192)`` built on ``meta`` and estimated at batch 16384 (its
  forward is 4.398e13 FLOPs): the median of repeated estimates, formulas fitted each time;
- the plain-module transformer LM of ``examples/ex06_transformer_lm.py`` at GPT-2 XL sizes
  (48 layers, d_model 1600, d_ff 6400, vocab 50257; 1.5e9 parameters on ``meta``) estimated at
  batch 8, seq 1024 (target < 5 s);
- the process's peak resident memory before and after (real weights would need ~6 GB).

Run: ``python benchmarks/estimate.py``
"""

from __future__ import annotations

import importlib.util
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from typedflops.nn import TwoLayerMLP


def _example_lm() -> Any:
    path = Path(__file__).resolve().parents[1] / "examples" / "ex06_transformer_lm.py"
    spec = importlib.util.spec_from_file_location("ex06_transformer_lm", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TransformerLM


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
    lm_class = _example_lm()
    with torch.device("meta"):
        lm = lm_class(vocab=50257, d_model=1600, n_layers=48, n_heads=25, d_ff=6400)
    lm_class.forward.estimate(lm, batch=1, seq=8)  # first use: torch's mode machinery loads
    start = time.perf_counter()
    cost = lm_class.forward.estimate(lm, batch=8, seq=1024)
    elapsed = time.perf_counter() - start
    print(
        f"GPT-2 XL-size LM (48 layers, d_model=1600).estimate(batch=8, seq=1024): "
        f"{cost.flops:.4g} FLOPs forward, exact={cost.exact}, {elapsed:.2f} s (target < 5 s)"
    )
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak resident memory {before / 1024:.0f} MiB before, {after / 1024:.0f} MiB after")


if __name__ == "__main__":
    main()
