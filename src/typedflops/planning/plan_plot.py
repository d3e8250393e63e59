"""A planned step against the batch size: its memory terms, peak and time from the plan's
formulas (:func:`batch_sweep`), drawn with matplotlib (:func:`plot_plan`, ``typedflops plan
--plot``)."""

from __future__ import annotations

import sympy
import torch

from ..cost.types import palm_model_flops
from ..nn import TransformerLM
from ..text import dtype_name
from .plan_report import TrainingPlan
from .training import MEMORY_TERMS, peak_at

__all__ = ["batch_sweep", "plot_plan"]


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
    model_flops = palm_model_flops(cost.matmul_formula)
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
    dtype = dtype_name(step.memory.dtype)
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
