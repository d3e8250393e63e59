"""The ``typedflops`` command: ``demo`` (the lecture's models, costed and timed) and ``devices``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from .text import format_count, text_table

__all__ = ["main"]


@dataclass(frozen=True)
class DemoSizes:
    """Batch, width and output size of the demo's models, with the dtype they run in."""

    batch: int
    d: int
    k: int
    dtype: torch.dtype


#: CS336 lecture 2's sizes on a GPU; small enough for a laptop CPU otherwise.
GPU_SIZES = DemoSizes(batch=16384, d=32768, k=8192, dtype=torch.bfloat16)
CPU_SIZES = DemoSizes(batch=1024, d=256, k=64, dtype=torch.float32)


def _progress(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def _shape_error_demo() -> list[str]:
    from .decorator import typed_flops
    from .errors import ShapeError
    from .ops import einsum

    @typed_flops
    def linear(
        x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
    ) -> Float[Tensor, "batch d_out"]:
        return einsum(x, w, "batch d_in, d_in d_out -> batch d_out")

    lines = ["A checked call, and a call with a wrong shape (caught before any kernel ran):"]
    y = linear(torch.ones(8, 784), torch.ones(784, 10))
    lines.append(f"  linear(x (8, 784), w (784, 10)) -> {tuple(y.shape)}; formula {linear.formula}")
    try:
        linear(torch.ones(8, 784), torch.ones(600, 10))
    except ShapeError as exc:
        lines += ["  " + line for line in f"ShapeError: {exc}".splitlines()]
    return lines


def demo(device: str | None = None, plot: str | None = None, quick: bool = False) -> str:
    """Run the lecture's linear and two-layer models; return the report as text."""
    from .bench import benchmark
    from .nn import Linear, TwoLayerMLP

    target = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    sizes = GPU_SIZES if target.type == "cuda" else CPU_SIZES
    if quick:
        sizes = DemoSizes(batch=64, d=32, k=16, dtype=sizes.dtype)
    torch.manual_seed(0)
    lines = _shape_error_demo()
    lines.append("")
    lines.append(
        f"The lecture's models on {target} ({sizes.dtype}), B={sizes.batch}, "
        f"D={sizes.d}, K={sizes.k}:"
    )
    x = torch.randn(sizes.batch, sizes.d, device=target, dtype=sizes.dtype)
    models = {
        "Linear(D, K)": Linear(sizes.d, sizes.k, device=target, dtype=sizes.dtype),
        "TwoLayerMLP(D, D, K)": TwoLayerMLP(
            sizes.d, sizes.d, sizes.k, device=target, dtype=sizes.dtype
        ),
    }
    header = ["model", "formula (forward)", "FLOPs", "time", "FLOP/s", "MFU", "FLOP/B", "bound"]
    rows: list[list[str]] = []
    notes: list[str] = []
    measurements = []
    for label, model in models.items():
        cost = model.estimate(batch=sizes.batch)
        _progress(f"timing {label}")
        with torch.no_grad():
            measured = benchmark(
                model, x, repeat=5 if quick else 20, min_time=0.0 if quick else 0.2
            )
        measurements.append((label, measured))
        rows.append(
            [
                label,
                str(cost.formula),
                format_count(cost.flops),
                f"{measured.median * 1e3:.3g} ms",
                format_count(measured.flop_per_sec),
                "n/a" if measured.mfu is None else f"{measured.mfu:.1%}",
                f"{cost.intensity:.3g}",
                measured.bound or "n/a",
            ]
        )
        rows.append(
            [
                "  backward (x needs no grad)",
                str(cost.backward_formula),
                format_count(cost.backward_flops),
                "",
                "",
                "",
                "",
                "",
            ]
        )
        rule = 6 * sizes.batch * model.param_count
        notes.append(
            f"{label}: forward+backward {format_count(cost.flops + cost.backward_flops)}"
            f" FLOPs = {(cost.flops + cost.backward_flops) / rule:.3f} x the "
            f"6 x tokens x params rule ({format_count(rule)}); the input needs no grad"
        )
    lines.append(text_table(header, rows))
    lines += notes
    peak = measurements[0][1].peak_flop_per_sec
    lines.append("")
    lines.append(
        "MFU = measured FLOP/s / promised peak FLOP/s "
        + (
            f"({format_count(peak)}FLOP/s for {sizes.dtype} on this device)"
            if peak
            else "(no peak known for this device: see `typedflops devices`)"
        )
    )
    if plot:
        from .plot import roofline_plot

        roofline_plot([m for _, m in measurements], [label for label, _ in measurements], plot)
        lines.append(f"roofline plot written to {plot}")
    return "\n".join(lines)


def devices_report() -> str:
    """The peak table and what this machine's device is matched to."""
    from . import devices
    from .device_table import GPU_TABLE

    rates = ["float64", "float32", "tf32", "bfloat16", "float16", "float8"]
    header = ["device", *rates, "TB/s", "source"]
    rows = [
        [
            record.sku,
            *(
                "-" if record.tflops.get(rate) is None else f"{record.tflops[rate]:g}"
                for rate in rates
            ),
            f"{record.bandwidth_tbs:g}",
            record.source,
        ]
        for record in GPU_TABLE
    ]
    lines = ["Promised dense peaks (TFLOP/s) and memory bandwidth:", text_table(header, rows), ""]
    spec = devices.device_spec()
    if spec is None:
        lines.append("this machine's device: unknown (no peak figures)")
    else:
        peaks = ", ".join(
            f"{str(dtype).removeprefix('torch.')} {format_count(value)}FLOP/s"
            for dtype, value in spec.peak_flops.items()
        )
        kind = "an estimate" if spec.estimate else "promised"
        lines.append(f"this machine's device: {spec.name} ({kind}): {peaks}")
        if spec.bandwidth:
            lines.append(f"  bandwidth {format_count(spec.bandwidth)}B/s; source: {spec.source}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``typedflops`` console script."""
    parser = argparse.ArgumentParser(prog="typedflops", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="cost and time the lecture's models")
    demo_parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    demo_parser.add_argument("--plot", metavar="FILE.png", help="write a roofline plot")
    demo_parser.add_argument("--quick", action="store_true", help="tiny sizes, few runs")
    commands.add_parser("devices", help="the peak FLOP/s table and the current device")
    from . import plan

    plan.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "plan":
        return plan.run(args)
    if args.command == "demo":
        print(demo(device=args.device, plot=args.plot, quick=args.quick))
    else:
        print(devices_report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
