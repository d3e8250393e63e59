"""Planning a training step: will it fit, and how long will it take (``typedflops plan``).

A named config (:data:`typedflops.nn.CONFIGS`) is built on ``meta`` and its loss dry-run at
the batch and sequence length asked: FLOPs (forward, backward, recomputation), memory
(parameters, gradients, optimizer state, master weights, activations) and their formulas,
the step's peak (allocation by allocation) and whether it fits the device's memory, and
the step's time on it.

The dry runs cost the kernels of the device planned for, on any machine
(:func:`typedflops.planning.kernels_of`): for a GPU, the attention kernel torch picks there
(flash for 16-bit inputs) and CUDA's fused RMS norm, with their FLOPs (FlopCounterMode's)
and the tensors they save for backward.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from .. import devices
from ..cost.engine.kernels import kernels_of
from ..devices import DeviceSpec
from ..errors import SpecError
from ..nn import CONFIGS, TransformerConfig, TransformerLM
from ..text import format_count, text_table, wrap_lines
from .steptime import StepTime, step_time
from .training import MEMORY_TERMS, TrainingMemory, optimizer_key, peak_at, training_memory

__all__ = ["TrainingPlan", "add_parser", "batch_sweep", "plan", "plot_plan", "run"]

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
#: The JSON keys of the memory terms (figures and formulas alike).
_BYTE_KEYS = {
    "parameters": "parameter_bytes",
    "gradients": "gradient_bytes",
    "optimizer": "optimizer_bytes",
    "master_weights": "master_weight_bytes",
    "activations": "activation_bytes",
    "total": "total_bytes",
}


@dataclass(frozen=True)
class TrainingPlan:
    """One training step of a config on a device: memory, FLOPs, time, and whether it fits."""

    model: str
    config: TransformerConfig
    batch: int
    seq: int
    device: DeviceSpec
    memory: TrainingMemory
    time: StepTime
    capacity: int | None
    capacity_source: str | None

    @property
    def fits(self) -> bool | None:
        """Whether the step's peak fits the device's memory (None when it is unknown)."""
        return None if self.capacity is None else self.memory.peak <= self.capacity

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the figures, the formulas and the dims they are in."""
        cost = self.memory.cost
        numbers = self.memory.bytes
        return {
            "model": self.model,
            "batch": self.batch,
            "seq": self.seq,
            "dtype": str(self.memory.dtype).removeprefix("torch."),
            "optimizer": self.memory.optimizer,
            "device": self.device.name,
            "parameters": self.memory.parameters.total,
            "forward_flops": cost.flops,
            "matmul_forward_flops": cost.matmul_flops,
            "backward_flops": cost.backward_flops,
            "recompute_flops": cost.recompute_flops,
            "step_flops": self.time.step_flops,
            "model_flops": self.time.model_flops,
            **{name: numbers[key] for key, name in _BYTE_KEYS.items()},
            "peak_bytes": self.memory.peak,
            "forward_backward_bytes": self.memory.forward_backward,
            "device_memory_bytes": self.capacity,
            "fits": self.fits,
            "step_seconds": self.time.seconds,
            "roofline_seconds": self.time.roofline_seconds,
            "bound": self.time.bound,
            "least_traffic_bytes": self.time.step_bytes,
            "unfused_traffic_bytes": self.time.unfused_bytes,
            "mfu": self.time.mfu,
            "formulas": {
                "forward_flops": str(cost.formula),
                "matmul_forward_flops": str(cost.matmul_formula),
                "backward_flops": str(cost.backward_formula),
                "recompute_flops": str(cost.recompute_formula),
                "parameters": str(self.memory.parameters.formula),
                **{name: str(self.memory.formulas[key]) for key, name in _BYTE_KEYS.items()},
            },
            "dims": {name: int(size) for name, size in self.memory.dims.items()},
        }

    def text(self) -> str:
        """The plan as a report: FLOPs, memory, fit and time, then the formulas."""
        config, cost, memory, timing = self.config, self.memory.cost, self.memory, self.time
        kind = "LLaMA style" if config.positions == "rope" else "GPT-2 style"
        lines = [
            f"{self.model} ({kind}: {config.n_layers} layers, d_model {config.d_model}, "
            f"{config.n_heads} heads of {config.d_head}, d_ff {config.d_ff}, vocab "
            f"{config.vocab}; {format_count(memory.parameters.total)} parameters)",
            f"one step: batch {self.batch} x seq {self.seq}, {_dtype(memory.dtype)}, "
            f"{memory.optimizer or 'no optimizer'}"
            f"{', activation checkpointing' if config.checkpoint else ''}, on {self.device.name}",
            "",
        ]
        step_rule = "3x" if not cost.recompute_flops else "with recomputation"
        flops = [
            ["forward", format_count(cost.flops), "all ops"],
            ["  matmuls", format_count(cost.matmul_flops), "matrix products only"],
            ["backward", format_count(cost.backward_flops), ""],
            *(
                [["recomputed", format_count(cost.recompute_flops), "checkpointed forward"]]
                if cost.recompute_flops
                else []
            ),
            ["step", format_count(timing.step_flops), f"forward + backward ({step_rule})"],
            ["model FLOPs", format_count(timing.model_flops), "PaLM: 3x matmuls, for MFU"],
        ]
        lines.append(text_table(["FLOPs", "count", ""], flops, right={1}))
        lines.append("")
        lines.append(text_table(["memory", "GB", ""], memory.rows(_gb), right={1}))
        if self.capacity is None:
            lines.append(f"fits: unknown (no memory figure for {self.device.name})")
        else:
            verdict = "yes" if self.fits else "NO"
            lines.append(
                f"fits in {self.device.name}'s {_gb(self.capacity)} GB: {verdict} "
                f"(peak {memory.peak / self.capacity:.0%} of it)"
            )
            lines.append(f"  memory: {self.capacity_source}")
        lines.append("")
        lines.append(
            f"step time: at {timing.mfu:.0%} MFU {_seconds(timing.seconds)}; roofline bound "
            f"{_seconds(timing.roofline_seconds)} ({timing.bound}-bound; peak "
            f"{format_count(timing.peak_flop_per_sec)}FLOP/s {_dtype(memory.dtype)})"
        )
        if timing.bandwidth:
            lines.append(
                f"traffic: at least {_gb(timing.step_bytes)} GB (weights read twice, gradients "
                f"written, saved activations written and read), "
                f"{_seconds(timing.step_bytes / timing.bandwidth)}; every op unfused "
                f"{_gb(timing.unfused_bytes)} GB, "
                f"{_seconds(timing.unfused_bytes / timing.bandwidth)} at "
                f"{format_count(timing.bandwidth)}B/s"
            )
        lines.append("")
        shown = ", ".join(f"{name}={size}" for name, size in memory.dims.items())
        lines.append(f"formulas, in {shown}:")
        # The prose fits 100 columns; each formula stays one line, whole, to be copied.
        prose = wrap_lines("\n".join(lines), 100)
        formulas = [
            ("forward FLOPs", cost.formula),
            ("matmul FLOPs", cost.matmul_formula),
            ("backward FLOPs", cost.backward_formula),
            *([("recomputed FLOPs", cost.recompute_formula)] if cost.recompute_flops else []),
            ("parameters", memory.parameters.formula),
            ("activation bytes", memory.formulas["activations"]),
            ("total bytes", memory.formulas["total"]),
        ]
        return "\n".join([prose, *(f"  {label}: {formula}" for label, formula in formulas)])


def _kernels_of(spec: DeviceSpec) -> contextlib.AbstractContextManager[None]:
    """Dry runs inside cost the kernels of the device ``spec`` names (a CPU's, or a GPU's)."""
    return kernels_of("cpu" if spec.kind == "cpu" else "cuda")


def _gb(value: float) -> str:
    return f"{value / 1e9:.2f}"


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _seconds(value: float) -> str:
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"


def plan(
    model: str | TransformerConfig,
    batch: int,
    seq: int,
    device: str | DeviceSpec = "H100 SXM",
    *,
    dtype: torch.dtype = torch.bfloat16,
    optimizer: str | None = "adamw",
    mfu: float = 0.4,
    checkpoint: bool = False,
) -> TrainingPlan:
    """Plan one training step of ``model`` (a name of :data:`typedflops.nn.CONFIGS` or a
    config) at ``batch`` x ``seq`` on ``device`` (a device-table name).

    >>> step = plan("gpt2", batch=8, seq=1024, device="H100 SXM")
    >>> step.fits, step.memory.parameters.total
    (True, 124439808)
    """
    if isinstance(model, str):
        if model not in CONFIGS:
            raise SpecError.at(
                None, f"unknown model {model!r}", hint=f"known: {', '.join(CONFIGS)}"
            )
        name, config = model, CONFIGS[model]
    else:
        name, config = "custom", model
    for label, value in (("batch", batch), ("seq", seq)):
        if type(value) is not int or value < 1:
            raise SpecError.at("plan()", f"{label}={value!r} is not a size >= 1")
    if seq > config.context:
        raise SpecError.at("plan()", f"seq={seq} is longer than {name}'s context {config.context}")
    optimizer_key(optimizer, "plan()")
    if not 0.0 < mfu <= 1.0:
        raise SpecError.at("plan()", f"mfu={mfu!r} must be in (0, 1]")
    config = dataclasses.replace(config, checkpoint=checkpoint or config.checkpoint)
    spec = devices.resolve(device)
    with torch.device("meta"):
        lm = TransformerLM(config, dtype=dtype)
    # The kernels of the device planned for (a GPU's flash attention and fused RMS norm),
    # whatever machine plans it.
    with _kernels_of(spec):
        memory = training_memory(lm, optimizer, dtype, batch=batch, seq=seq)
    timing = step_time(
        memory.cost,
        spec,
        dtype,
        mfu=mfu,
        parameter_bytes=memory.bytes["parameters"],
        gradient_bytes=memory.bytes["gradients"],
    )
    return TrainingPlan(
        model=name,
        config=config,
        batch=batch,
        seq=seq,
        device=spec,
        memory=memory,
        time=timing,
        capacity=None if spec.memory is None else int(spec.memory),
        capacity_source=spec.memory_source or None,
    )


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add the ``plan`` subcommand to the CLI's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "plan",
        help="FLOPs, memory and time of a training step of a named model",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "--model",
        required=True,
        help=f"one of {', '.join(CONFIGS)}; a JSON config (TransformerConfig fields, or a "
        "Hugging Face config.json of GPT-2 or LLaMA); or package.module:factory",
    )
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--device", default="H100 SXM", help='device-table name ("H100 SXM")')
    parser.add_argument("--dtype", default="bfloat16", choices=list(_DTYPES))
    parser.add_argument("--optimizer", default="adamw", help="adamw, adam, sgd, momentum...")
    parser.add_argument("--mfu", type=float, default=0.4, help="MFU for the predicted time")
    parser.add_argument("--checkpoint", action="store_true", help="recompute each block")
    ranks = parser.add_argument_group(
        "parallel layout", "plan each rank's share of the step (torch's own sharding, dry-run)"
    )
    ranks.add_argument("--dp", type=int, default=1, help="data-parallel ranks")
    ranks.add_argument(
        "--zero", type=int, default=0, choices=(0, 1, 2, 3), help="ZeRO stage (3: fully_shard)"
    )
    ranks.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks")
    ranks.add_argument("--sp", action="store_true", help="sequence parallelism (with --tp)")
    ranks.add_argument("--pp", type=int, default=1, help="pipeline stages (1F1B)")
    ranks.add_argument(
        "--microbatches", type=int, default=1, help="microbatches a step (per data-parallel rank)"
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="plot memory and time against batch")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``typedflops plan`` with parsed arguments; 2 for a bad request (the reason on
    stderr)."""
    import sys

    from .model_source import resolve_model

    sizes = (args.dp, args.tp, args.pp, args.microbatches)
    parallel = any(size != 1 for size in sizes) or bool(args.zero or args.sp)
    try:
        name, config = resolve_model(args.model)
        if parallel:
            return _run_parallel(args, name, config)
        step = plan(
            config if name not in CONFIGS else name,
            args.batch,
            args.seq,
            args.device,
            dtype=_DTYPES[args.dtype],
            optimizer=args.optimizer,
            mfu=args.mfu,
            checkpoint=args.checkpoint,
        )
    except SpecError as exc:
        print(f"typedflops plan: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(step.to_dict(), indent=2) if args.json else step.text())
    if args.plot:
        plot_plan(step, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _run_parallel(args: argparse.Namespace, name: str, config: TransformerConfig) -> int:
    """``typedflops plan`` with a parallel layout: rank 0's share of the step."""
    from .layout import ParallelLayout
    from .ranks import plan_parallel

    if args.plot:
        raise SpecError.at("--plot", "plots one device's step: leave out the parallel layout")
    layout = ParallelLayout(
        dp=args.dp,
        zero=args.zero,
        tp=args.tp,
        sp=args.sp,
        pp=args.pp,
        microbatches=args.microbatches,
        checkpoint=args.checkpoint,
    )
    step = plan_parallel(
        config,
        args.batch,
        args.seq,
        args.device,
        layout,
        dtype=_DTYPES[args.dtype],
        optimizer=args.optimizer,
        mfu=args.mfu,
    )
    step = dataclasses.replace(step, model=name)
    print(json.dumps(step.to_dict(), indent=2) if args.json else step.text())
    return 0


def batch_sweep(step: TrainingPlan, batches: list[int]) -> dict[str, list[float]]:
    """Memory terms (bytes) and step time (s, at the plan's MFU) at each batch size, from
    the plan's formulas.

    >>> from typedflops.planning.planner import plan
    >>> sweep = batch_sweep(plan("gpt2", 8, 1024), [8, 16])
    >>> sweep["total"][1] > sweep["total"][0], round(sweep["seconds"][1] / sweep["seconds"][0])
    (True, 2)
    """
    memory, timing = step.memory, step.time
    model_flops = 3 * memory.cost.matmul_formula
    found: dict[str, list[float]] = {key: [] for key in (*memory.formulas, "seconds")}
    for batch in batches:
        values = {sympy.Symbol(n): v for n, v in {**memory.dims, "batch": batch}.items()}
        for key, formula in memory.formulas.items():
            found[key].append(float(sympy.sympify(formula).xreplace(values)))
        flops = float(model_flops.xreplace(values))
        found["seconds"].append(flops / (timing.mfu * timing.peak_flop_per_sec))
    return found


def plot_plan(step: TrainingPlan, path: str) -> None:
    """Write a two-panel plot: memory by term (stacked: every term held at once) and the
    peak (a dry run at five batch sizes), and step time, against the batch size (up to
    four times the plan's), with the device's memory as a line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            "typedflops: --plot needs matplotlib; install it with pip install 'typedflops[plot]'"
        ) from None
    batches = sorted({max(1, round(step.batch * k / 8)) for k in range(1, 33)})
    sweep = batch_sweep(step, batches)
    # The peak is no formula: one dry run of forward and backward per point.
    marks = sorted({max(1, step.batch * k // 4) for k in (1, 2, 4, 8, 16)})
    with torch.device("meta"):
        lm = TransformerLM(step.config, dtype=step.memory.dtype)
    with _kernels_of(step.device):
        peaks = [peak_at(lm, step.memory, batch=b, seq=step.seq) / 1e9 for b in marks]
    figure, (memory_axes, time_axes) = plt.subplots(1, 2, figsize=(11, 4.5))
    bottom = [0.0] * len(batches)
    for key in MEMORY_TERMS:
        top = [b + v / 1e9 for b, v in zip(bottom, sweep[key], strict=True)]
        if any(v for v in sweep[key]):
            memory_axes.fill_between(batches, bottom, top, label=key.replace("_", " "))
        bottom = top
    memory_axes.plot(marks, peaks, color="black", marker="o", label="peak (dry runs)")
    if step.capacity is not None:
        memory_axes.axhline(step.capacity / 1e9, color="black", linestyle="--")
        memory_axes.annotate(
            f"{step.device.name} ({step.capacity / 1e9:.0f} GB)",
            (batches[0], step.capacity / 1e9),
            textcoords="offset points",
            xytext=(4, 4),
        )
    memory_axes.axvline(step.batch, color="grey", linewidth=0.8)
    memory_axes.set_xlabel("batch")
    memory_axes.set_ylabel("GB")
    memory_axes.set_title(f"{step.model}, seq {step.seq}: memory of a step")
    memory_axes.legend(loc="center left")
    time_axes.plot(batches, [s * 1e3 for s in sweep["seconds"]])
    time_axes.axvline(step.batch, color="grey", linewidth=0.8)
    time_axes.set_xlabel("batch")
    time_axes.set_ylabel("ms")
    time_axes.set_title(f"step time at {step.time.mfu:.0%} MFU on {step.device.name}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
