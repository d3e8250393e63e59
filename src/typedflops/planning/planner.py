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

import dataclasses
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from .. import devices
from ..devices import DeviceSpec
from ..errors import SpecError
from ..nn import CONFIGS, TransformerConfig, TransformerLM
from ..text import format_count, text_table, wrap_lines
from .steptime import StepTime, step_time
from .training import MEMORY_TERMS, TrainingMemory, optimizer_key, peak_at, training_memory

__all__ = ["TrainingPlan", "batch_sweep", "plan", "plot_plan"]

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
            "kernels": self.memory.kernels,
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
        lines += memory.notes()
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
        # Everything fits 100 columns; --json has each formula on one line, to be copied.
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
        wrapped = [wrap_lines(f"  {label}: {formula}", 100) for label, formula in formulas]
        return "\n".join([prose, *wrapped])


def _kernels(spec: DeviceSpec) -> str:
    """The device type whose kernels a plan for ``spec`` costs (a CPU's, or a GPU's)."""
    return "cpu" if spec.kind == "cpu" else "cuda"


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
    peak: float | None = None,
) -> TrainingPlan:
    """Plan one training step of ``model`` (a name of :data:`typedflops.nn.CONFIGS` or a
    config) at ``batch`` x ``seq`` on ``device`` (a device-table name); ``peak`` (FLOP/s)
    overrides the device's peak at ``dtype``. The dry runs cost the device's kernels.

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
    memory = training_memory(lm, optimizer, dtype, kernels=_kernels(spec), batch=batch, seq=seq)
    timing = step_time(
        memory.cost,
        spec,
        dtype,
        mfu=mfu,
        parameter_bytes=memory.bytes["parameters"],
        gradient_bytes=memory.bytes["gradients"],
        peak=peak,
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


def batch_sweep(step: TrainingPlan, batches: list[int]) -> dict[str, list[float]]:
    """Memory terms (bytes), step time (``seconds``, at the plan's MFU) and the roofline
    bound (``roofline_seconds``: the step's FLOPs at the peak or its least traffic at the
    bandwidth, whichever is longer) at each batch size, from the plan's formulas.

    >>> from typedflops.planning.planner import plan
    >>> sweep = batch_sweep(plan("gpt2", 8, 1024), [8, 16])
    >>> sweep["total"][1] > sweep["total"][0], round(sweep["seconds"][1] / sweep["seconds"][0])
    (True, 2)
    >>> all(b < s for b, s in zip(sweep["roofline_seconds"], sweep["seconds"]))
    True
    """
    memory, timing, cost = step.memory, step.time, step.memory.cost
    model_flops = 3 * cost.matmul_formula
    step_flops = cost.formula + cost.backward_formula + cost.recompute_formula
    traffic = (
        2 * memory.bytes["parameters"] + memory.bytes["gradients"] + 2 * cost.activation_formula
    )
    found: dict[str, list[float]] = {
        key: [] for key in (*memory.formulas, "seconds", "roofline_seconds")
    }
    for batch in batches:
        values = {sympy.Symbol(n): v for n, v in {**memory.dims, "batch": batch}.items()}
        for key, formula in memory.formulas.items():
            found[key].append(float(sympy.sympify(formula).xreplace(values)))
        flops = float(model_flops.xreplace(values))
        found["seconds"].append(flops / (timing.mfu * timing.peak_flop_per_sec))
        bound = float(sympy.sympify(step_flops).xreplace(values)) / timing.peak_flop_per_sec
        if timing.bandwidth:
            moved = float(sympy.sympify(traffic).xreplace(values))
            bound = max(bound, moved / timing.bandwidth)
        found["roofline_seconds"].append(bound)
    return found


def plot_plan(step: TrainingPlan, path: str) -> None:
    """Write a two-panel plot against the batch size (up to four times the plan's): memory
    by term (stacked: every term held at once), the peak (a dry run at five batch sizes)
    and the device's memory; step time at the plan's MFU and its roofline bound. The title
    names the model, the sequence length, the dtype, the optimizer and the device."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = sorted({max(1, round(step.batch * k / 8)) for k in range(1, 33)})
    sweep = batch_sweep(step, batches)
    # The peak is no formula: one dry run of forward and backward per point.
    marks = sorted({max(1, step.batch * k // 4) for k in (1, 2, 4, 8, 16)})
    with torch.device("meta"):
        lm = TransformerLM(step.config, dtype=step.memory.dtype)
    peaks = [peak_at(lm, step.memory, batch=b, seq=step.seq) / 1e9 for b in marks]
    figure, (memory_axes, time_axes) = plt.subplots(1, 2, figsize=(11, 5.2))
    bottom = [0.0] * len(batches)
    for key in MEMORY_TERMS:
        top = [b + v / 1e9 for b, v in zip(bottom, sweep[key], strict=True)]
        if any(v for v in sweep[key]):
            memory_axes.fill_between(batches, bottom, top, label=key.replace("_", " "))
        bottom = top
    memory_axes.plot(marks, peaks, color="black", marker="o", label="peak, steady state (dry runs)")
    if step.capacity is not None:
        memory_axes.axhline(
            step.capacity / 1e9,
            color="black",
            linestyle="--",
            label=f"{step.device.name} memory ({step.capacity / 1e9:.0f} GB)",
        )
    for axes in (memory_axes, time_axes):
        axes.axvline(step.batch, color="grey", linewidth=0.8, label=f"planned batch {step.batch}")
        axes.set_xlabel("batch (sequences per step)")
        axes.set_xlim(0, batches[-1] * 1.02)
        axes.grid(True, linewidth=0.3)
    memory_axes.set_ylabel("GB")
    memory_axes.set_title("memory of a step (terms stacked)", fontsize=10)
    time_axes.plot(
        batches,
        [s * 1e3 for s in sweep["seconds"]],
        color="tab:blue",
        label=f"at {step.time.mfu:.0%} MFU",
    )
    time_axes.plot(
        batches,
        [s * 1e3 for s in sweep["roofline_seconds"]],
        color="tab:blue",
        linestyle=":",
        label="roofline bound (at peak FLOP/s or bandwidth)",
    )
    time_axes.set_ylabel("ms")
    time_axes.set_title("step time", fontsize=10)
    for axes in (memory_axes, time_axes):
        axes.set_ylim(bottom=0)
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8.5)
    dtype = _dtype(step.memory.dtype)
    figure.suptitle(
        f"{step.model}: one training step at seq {step.seq}, {dtype}, "
        f"{step.memory.optimizer or 'no optimizer'}"
        f"{', activation checkpointing' if step.config.checkpoint else ''}, on "
        f"{step.device.name}",
        fontsize=11,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
