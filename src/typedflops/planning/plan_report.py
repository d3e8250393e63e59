"""A planned training step and its renderings: the report ``typedflops plan`` prints and
its JSON (``--json``). The plan itself is made by :func:`typedflops.planning.plan`
(:mod:`.planner`); its plot is :mod:`.plan_plot`'s."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..devices import DeviceSpec
from ..nn import TransformerConfig
from ..text import dtype_name, format_count, text_table, wrap_lines
from .steptime import StepTime
from .training import TrainingMemory

__all__ = ["TrainingPlan", "caveats"]

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
        capability = self.memory.capability
        return {
            "model": self.model,
            "batch": self.batch,
            "seq": self.seq,
            "dtype": dtype_name(self.memory.dtype),
            "optimizer": self.memory.optimizer,
            "device": self.device.name,
            "kernels": self.memory.kernels,
            "capability": None if capability is None else list(capability),
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
            "uncounted": list(cost.uncounted),
            "assumed": list(cost.assumed),
        }

    def text(self) -> str:
        """The plan as a report: FLOPs, memory, fit and time, then the formulas."""
        config, cost, memory, timing = self.config, self.memory.cost, self.memory, self.time
        kind = "LLaMA style" if config.positions == "rope" else "GPT-2 style"
        lines = [
            f"{self.model} ({kind}: {config.n_layers} layers, d_model {config.d_model}, "
            f"{config.n_heads} heads of {config.d_head}, d_ff {config.d_ff}, vocab "
            f"{config.vocab}; {format_count(memory.parameters.total)} parameters)",
            f"one step: batch {self.batch} x seq {self.seq}, {dtype_name(memory.dtype)}, "
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
        lines += caveats(cost.uncounted, cost.assumed)
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
            f"{format_count(timing.peak_flop_per_sec)}FLOP/s {dtype_name(memory.dtype)})"
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


def caveats(uncounted: Sequence[str], assumed: Sequence[str]) -> list[str]:
    """The lines saying what a plan's FLOPs leave out: ops without a rule, counted 0, and
    what was taken as given where values decide the work."""
    lines = [f"  values not known: {note}" for note in assumed]
    if uncounted:
        lines.insert(0, f"  uncounted ops (0 FLOPs in these figures): {', '.join(uncounted)}")
    return lines


def _gb(value: float) -> str:
    return f"{value / 1e9:.2f}"


def _seconds(value: float) -> str:
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"
