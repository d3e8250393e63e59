"""How ``estimate()`` scales with depth: a plain ``nn.Sequential`` of N equal blocks
(``nn.Sequential(nn.Linear(16, 16), nn.ReLU())``) estimated at ``b=4``, side by side with one
real forward and backward of the same model under torch's ``FlopCounterMode``, at N = 1,000
and N = 10,000.

Each measurement runs in a fresh process, so that its peak resident memory is its own: the
figure is the growth of the process's peak over what it held once the model was built and
one small estimate had run (torch's lazy imports and caches), and the time is CPU time and
wall time of the one call. The counts are printed too: the estimate's forward, backward and
total FLOPs at b=4, and FlopCounterMode's total (it counts the products only, so it is
below the estimate's by the ReLUs and the biases' gradient sums).

Run: ``python benchmarks/estimate_deep.py`` (``--quick``: N = 1,000 only).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import estimate

WIDTH = 16
BATCH = 4


def deep(blocks: int) -> nn.Module:
    """N equal blocks, each a Linear and a ReLU."""
    return nn.Sequential(
        *[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(blocks)]
    )


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # (Linux: KiB)


def measure(kind: str, blocks: int) -> dict[str, Any]:
    """One measurement in this process: ``kind`` is ``estimate`` or ``flopcounter``."""
    estimate(deep(2), Float[Tensor, "b 16"], b=BATCH)  # torch's lazy imports and caches
    model = deep(blocks)
    gc.collect()
    before = _peak_mib()
    cpu, wall = time.process_time(), time.perf_counter()
    if kind == "estimate":
        cost = estimate(model, Float[Tensor, "b 16"], b=BATCH)
        counts = {
            "forward": int(cost.flops),
            "backward": int(cost.backward_flops),
            "total": int(cost.flops + cost.backward_flops),
        }
    else:
        with FlopCounterMode(display=False) as counter:
            model(torch.randn(BATCH, WIDTH)).sum().backward()
        counts = {"total": int(counter.get_total_flops())}
    return {
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.perf_counter() - wall,
        "peak_mib": _peak_mib() - before,
        **counts,
    }


def _in_child(kind: str, blocks: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--one", kind, str(blocks)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 1,000 only")
    parser.add_argument("--one", nargs=2, metavar=("KIND", "BLOCKS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one[0], int(args.one[1]))))
        return
    sizes = [1000] if args.quick else [1000, 10000]
    print(f"nn.Sequential of N x (Linear({WIDTH}, {WIDTH}), ReLU()), b={BATCH}")
    print(f"{'N':>6}  {'what':<34} {'cpu s':>7} {'wall s':>7} {'peak MiB':>9}  FLOPs (fwd+bwd)")
    for blocks in sizes:
        ours = _in_child("estimate", blocks)
        real = _in_child("flopcounter", blocks)
        for label, found in (
            ("estimate() (dry runs, fits, checks)", ours),
            ("FlopCounterMode, 1 forward+backward", real),
        ):
            print(
                f"{blocks:>6}  {label:<34} {found['cpu_s']:>7.2f} {found['wall_s']:>7.2f} "
                f"{found['peak_mib']:>9.0f}  {found['total']:,}"
            )
        print(
            f"{'':>6}  estimate / FlopCounterMode: {ours['wall_s'] / real['wall_s']:.1f}x "
            f"time (wall), {ours['peak_mib'] / max(real['peak_mib'], 1.0):.1f}x peak memory"
        )


if __name__ == "__main__":
    main()
