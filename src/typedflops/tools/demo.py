"""The ``typedflops demo`` and ``typedflops devices`` commands: the lecture's models, costed
and timed, and the peak table with this machine's device.

Bad usage (an unknown or unavailable device) is a ``UsageError``, found before any work is
done. Output fits 100 columns unless ``--wide`` is given.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from ..errors import UsageError
from ..text import (
    TERMINAL_WIDTH,
    dtype_name,
    fit_table,
    format_percent,
    format_si,
    text_table,
    wrap_lines,
)
from .plot_path import check_plot_path

if TYPE_CHECKING:
    from ..timing.bench import Measurement

__all__ = ["demo", "devices_report", "resolve_device"]


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
QUICK = (64, 32, 16)


def resolve_device(name: str | None) -> torch.device:
    """The device ``--device name`` names, or ``UsageError`` when it is unknown or absent.

    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("tpu")
    Traceback (most recent call last):
    ...
    typedflops.errors.UsageError: --device 'tpu' is not a device torch knows; use cpu, cuda or mps
    """
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UsageError(
            f"--device {name!r} is not a device torch knows; use cpu, cuda or mps"
        ) from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            built = "" if torch.version.cuda or torch.version.hip else ", built without CUDA"
            raise UsageError(
                f"--device {name}: CUDA is not available (torch {torch.__version__}{built})"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise UsageError(f"--device {name}: this machine has {count} CUDA device(s)")
        return device
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise UsageError(
                f"--device {name}: MPS is not available (it needs an Apple-silicon Mac and a "
                "torch built with MPS)"
            )
        return device
    raise UsageError(f"--device {name}: the demo runs on cpu, cuda or mps, not {device.type}")


def _say(message: str) -> None:
    """A line of progress on stderr, for a person watching a terminal only."""
    if sys.stderr is not None and sys.stderr.isatty():
        print(f"typedflops: {message}", file=sys.stderr, flush=True)


def _shape_error_demo() -> list[str]:
    from ..decorator import typed_flops
    from ..einops.ops import einsum
    from ..errors import ShapeError

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


def demo(
    device: str | None = None, plot: str | None = None, quick: bool = False, wide: bool = False
) -> str:
    """Run the lecture's linear and two-layer models; return the report as text.

    ``device`` and ``plot`` are checked first (``UsageError``), before anything runs.
    """
    from .. import devices
    from ..nn import Linear, TwoLayerMLP
    from ..timing.bench import benchmark

    target = resolve_device(device)
    if plot:
        check_plot_path(plot)
    sizes = GPU_SIZES if target.type == "cuda" else CPU_SIZES
    if quick:
        sizes = DemoSizes(*QUICK, dtype=sizes.dtype)
    width = None if wide else TERMINAL_WIDTH
    torch.manual_seed(0)
    dtype_text = dtype_name(sizes.dtype)
    lines = [*_shape_error_demo(), ""]
    lines.append(
        f"The lecture's models on {target} ({dtype_text}), B={sizes.batch}, D={sizes.d}, "
        f"K={sizes.k}; the input needs no grad:"
    )
    x = torch.randn(sizes.batch, sizes.d, device=target, dtype=sizes.dtype)
    models = {
        "Linear(D, K)": Linear(sizes.d, sizes.k, device=target, dtype=sizes.dtype),
        "TwoLayerMLP(D, D, K)": TwoLayerMLP(
            sizes.d, sizes.d, sizes.k, device=target, dtype=sizes.dtype
        ),
    }
    cost_rows: list[list[str]] = []
    timed: list[tuple[str, Measurement]] = []
    for label, model in models.items():
        cost = model.estimate(batch=sizes.batch)
        rule = 6 * sizes.batch * model.param_count
        total = cost.flops + cost.backward_flops
        cost_rows.append(
            [label, "forward", str(cost.formula), format_si(cost.flops, "FLOP"), "", ""]
        )
        cost_rows.append(
            [
                "",
                "backward",
                str(cost.backward_formula),
                format_si(cost.backward_flops, "FLOP"),
                format_si(total, "FLOP"),
                f"{total / rule:.3f}",
            ]
        )
        _say(f"timing {label}")
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an unknown peak is explained below instead
            measured = benchmark(
                model, x, repeat=5 if quick else 20, min_time=0.0 if quick else 0.2
            )
        timed.append((label, measured))
    header = ["model", "pass", "formula", "FLOPs", "fwd+bwd", "/ 6ND"]
    table, _ = fit_table(header, cost_rows, right={3, 4, 5}, width=width)
    lines += [table, "(6ND: 6 x tokens x parameters, the usual estimate of a training step)", ""]
    lines += _timing_report(timed, width)
    lines += _peak_report(target, sizes.dtype, timed[0][1])
    if plot:
        from ..timing.plot import roofline_plot

        spec = devices.device_spec(target)
        roofline_plot(
            [m for _, m in timed],
            [label for label, _ in timed],
            plot,
            device_name=spec.name.removeprefix("cpu: ") if spec is not None else "",
            bandwidth=spec.bandwidth if spec is not None else None,
        )
        lines.append(f"roofline plot written to {plot}")
    return wrap_lines("\n".join(lines), width)


def _timing_report(timed: Sequence[tuple[str, Measurement]], width: int | None) -> list[str]:
    header = ["model", "median", "FLOP/s", "MFU", "FLOP/B", "bound", "min", "runs", "B/s"]
    rows: list[list[str]] = []
    noisy: list[str] = []
    for label, measured in timed:
        rows.append(
            [
                label,
                format_si(measured.median, "s"),
                format_si(measured.flop_per_sec, "FLOP/s"),
                "n/a" if measured.mfu is None else format_percent(measured.mfu),
                "n/a" if measured.intensity is None else f"{measured.intensity:.3g}",
                measured.bound or "n/a",
                format_si(measured.min, "s"),
                str(len(measured.times)),
                format_si(measured.bytes_per_sec, "B/s"),
            ]
        )
        if measured.noisy:
            noisy.append(f"{label}: noisy timing: {measured.noise}")
    first = timed[0][1]
    threads = f", {first.threads} torch threads" if first.threads is not None else ""
    table, dropped = fit_table(
        header, rows, right={1, 2, 3, 4, 6, 7, 8}, optional=[8, 7, 6], width=width
    )
    title = f"Timed forward passes (torch.no_grad{threads}):"
    more = [f"(--wide adds {', '.join(dropped)})"] if dropped else []
    return [title, table, *more, *noisy, ""]


def _peak_report(target: torch.device, dtype: torch.dtype, first: Measurement) -> list[str]:
    from .. import devices as device_module

    dtype_text = dtype_name(dtype)
    peak, source = device_module.peak_source(dtype, target)
    if peak is None:
        return [
            f"MFU n/a: no peak FLOP/s for {dtype_text} on {target}: {source}",
            f"Set {device_module.ENV_PEAK_FLOPS}=<FLOP/s> to give one (see `typedflops devices`).",
        ]
    lines = [
        f"MFU = measured FLOP/s / peak {format_si(peak, 'FLOP/s')} ({dtype_text}); {source}",
    ]
    if first.ridge is not None:
        bandwidth = peak / first.ridge
        measured = " (measured)" if target.type == "cpu" else ""
        lines.append(
            f"bound: FLOP/B against the ridge {first.ridge:.3g} FLOP/B = peak / bandwidth "
            f"{format_si(bandwidth, 'B/s')}{measured}"
        )
    return lines


def devices_report(wide: bool = False) -> str:
    """The peak table and what this machine's device is matched to."""
    from .. import devices
    from ..devices.gpus import GPU_TABLE

    width = TERMINAL_WIDTH
    rates = ["float64", "float32", "tf32", "bfloat16", "float16", "float8"]
    header = ["device", *rates, "TB/s"]
    rows = [
        [
            record.sku,
            *(
                "-" if record.tflops.get(rate) is None else f"{record.tflops[rate]:g}"
                for rate in rates
            ),
            f"{record.bandwidth_tbs:g}",
        ]
        for record in GPU_TABLE
    ]
    table = text_table(header, rows, right=set(range(1, len(rates) + 2)))
    lines = ["Promised dense peaks (TFLOP/s) and memory bandwidth (TB/s):", table]
    if wide:
        lines += ["", "sources:"]
        lines += [f"  {record.sku}: {record.source}" for record in GPU_TABLE]
    else:
        lines.append("(--wide adds the source of each row: a vendor datasheet or whitepaper)")
    lines.append("")
    target = resolve_device(None)
    spec = devices.device_spec(target)
    if spec is None:
        _, reason = devices.peak_source(torch.float32, target)
        lines.append(f"this machine's device: {target}: no peak figures ({reason})")
        return wrap_lines("\n".join(lines), width)
    cores = f", {spec.cores} cores in use (torch threads)" if spec.cores is not None else ""
    lines.append(f"this machine's device: {spec.name}{cores}")
    if spec.peak_flops:
        peaks = ", ".join(
            f"{str(dtype).removeprefix('torch.')} {format_si(value, 'FLOP/s')}"
            for dtype, value in spec.peak_flops.items()
        )
        lines.append(f"  peaks: {peaks}")
    else:
        lines.append(
            f"  peaks: unknown, {spec.missing}; set {devices.ENV_PEAK_FLOPS}=<FLOP/s> to give one"
        )
    if spec.bandwidth:
        measured = " (measured)" if spec.estimate else ""
        lines.append(f"  bandwidth: {format_si(spec.bandwidth, 'B/s')}{measured}")
    if spec.source:
        lines.append(f"  source: {spec.source}")
    return wrap_lines("\n".join(lines), width)
