"""How long a dry run takes at GPU sizes, and that it allocates nothing.

- ``TwoLayerMLP(32768, 32768, 8192)`` built on ``meta`` and estimated at batch 16384 (its
  forward is 4.398e13 FLOPs): the median of repeated estimates, formulas fitted each time;
- the plain-module transformer LM of ``examples/ex06_transformer_lm.py`` at GPT-2 XL sizes
  (48 layers, d_model 1600, d_ff 6400, vocab 50257; 1.5e9 parameters on ``meta``) estimated at
  batch 8, seq 1024 (target < 5 s);
- a plain ``nn.Sequential`` of 1,000 equal blocks (``Linear(16, 16)``, ``GELU``), estimated
  with torch's meta kernels run once per distinct call (what ``estimate`` does) and run for
  every op (nothing kept), side by side, CPU time;
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
    _blocks()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak resident memory {before / 1024:.0f} MiB before, {after / 1024:.0f} MiB after")


def _blocks(count: int = 1000) -> None:
    from jaxtyping import Float
    from torch import Tensor, nn

    from typedflops import estimate
    from typedflops.cost.engine import meta_outputs

    model = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(count)])
    spec = Float[Tensor, "batch 16"]
    seconds = {}
    limit = meta_outputs._LIMIT
    for name, kept in (("kept", limit), ("every op", 0)):
        meta_outputs._KEPT.clear()
        meta_outputs._LIMIT = kept
        start = time.process_time()
        cost = estimate(model, spec, batch=8)
        seconds[name] = time.process_time() - start
    meta_outputs._LIMIT = limit
    print(
        f"{count} blocks (Linear(16, 16), GELU): {cost.formula}, exact={cost.exact}; "
        f"{seconds['kept']:.1f} s CPU with each meta kernel run once per distinct call, "
        f"{seconds['every op']:.1f} s with every op's "
        f"({seconds['every op'] / seconds['kept']:.2f}x)"
    )


if __name__ == "__main__":
    main()
