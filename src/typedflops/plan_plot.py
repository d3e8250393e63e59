"""A plot of a training plan: memory and step time against the batch size, from its formulas.

Needs the optional ``matplotlib`` (``pip install typedflops[plot]``). No dry run is made: the
plan's formulas are evaluated at each batch size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy

if TYPE_CHECKING:
    from .plan import TrainingPlan

__all__ = ["batch_sweep", "plot_plan"]


def batch_sweep(step: TrainingPlan, batches: list[int]) -> dict[str, list[float]]:
    """Memory terms (bytes) and step time (s, at the plan's MFU) at each batch size, from
    the plan's formulas.

    >>> from typedflops.plan import plan
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
    """Write a two-panel plot: memory by term and step time against the batch size (1 to
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
    figure, (memory_axes, time_axes) = plt.subplots(1, 2, figsize=(11, 4.5))
    bottom = [0.0] * len(batches)
    for key in ("parameters", "gradients", "optimizer", "master_weights", "activations"):
        top = [b + v / 1e9 for b, v in zip(bottom, sweep[key], strict=True)]
        if any(v for v in sweep[key]):
            memory_axes.fill_between(batches, bottom, top, label=key.replace("_", " "))
        bottom = top
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
    memory_axes.legend(loc="upper left")
    time_axes.plot(batches, [s * 1e3 for s in sweep["seconds"]])
    time_axes.axvline(step.batch, color="grey", linewidth=0.8)
    time_axes.set_xlabel("batch")
    time_axes.set_ylabel("ms")
    time_axes.set_title(f"step time at {step.time.mfu:.0%} MFU on {step.device.name}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
