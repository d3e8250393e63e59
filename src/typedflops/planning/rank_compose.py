"""Rank 0's figures for a whole step, composed from its microbatch's (:mod:`.rank_fit`,
:mod:`.rank_run`) and ZeRO's closed forms (:mod:`.zero`).

What torch's run gives: the rank's parameters, gradients, activations (per microbatch),
FLOPs, tensor-parallel and FSDP collectives, the peak, and (stage 3) the optimizer's state.
What closed forms give: ZeRO stages 1 and 2 (the optimizer state, the fp32 master weights
and, stage 2, the gradients, divided by ``dp``), the data-parallel gradient collectives of
stages 0 to 2, pipeline sends and receives (the stage's output, both ways, per microbatch)
and the microbatches 1F1B holds (Narayanan et al. 2021).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sympy
import torch

from ..cost.types import palm_model_flops
from ..nn import TransformerConfig
from .figure import Figure
from .layout import ParallelLayout
from .rank_fit import Fitted, figures_of
from .rank_run import RankRun, StageKind, rank_run
from .training import OPTIMIZER_STATES

__all__ = [
    "Composer",
    "StageRuns",
    "communication",
    "figures",
    "held_states",
    "peak",
    "stage_runs",
    "whole",
]

_SIXTEEN_BIT = (torch.float16, torch.bfloat16)


def _symbols(*names: str) -> list[sympy.Symbol]:
    return [sympy.Symbol(name) for name in names]


def _totals(run: RankRun) -> dict[str, int]:
    """A run's figures summed over tags."""
    return {key: sum(entry[1] for entry in series) for key, series in figures_of(run).items()}


def _blocks_to_run(per_stage: int) -> tuple[int, ...]:
    """Blocks of the runs at the planned sizes: the stage itself when small, else three and
    four (every other block adds what the fourth did: by then the peak's place in the step
    no longer moves with the blocks, as it does with one or two under FSDP's prefetching)."""
    return (per_stage,) if per_stage <= 4 else (3, 4)


def _extrapolate(values: list[float], blocks: tuple[int, ...], per_stage: int) -> float:
    if len(blocks) == 1:
        return values[0]
    step = values[1] - values[0]
    return values[1] + (per_stage - blocks[1]) * step


@dataclass
class StageRuns:
    """Runs of one stage at the planned sizes, extrapolated to its blocks."""

    totals: dict[str, float]
    start: float
    forward_backward: float
    steady: float
    step: float
    uncounted: frozenset[str]
    assumed: tuple[str, ...] = ()


def stage_runs(
    config: TransformerConfig,
    layout: ParallelLayout,
    micro: int,
    seq: int,
    dtype: torch.dtype,
    stage: StageKind,
    optimizer: str | None,
    target: str,
    capability: tuple[int, int] | None = None,
) -> StageRuns:
    per_stage = config.n_layers // layout.pp
    blocks = _blocks_to_run(per_stage)
    # a later microbatch finds the gradients made: with two in flight on the first stage
    held = min(2, layout.in_flight) if stage != "last" else 1
    steady = held if layout.microbatches > 1 else 0
    runs = [
        rank_run(
            config,
            layout,
            micro,
            seq,
            dtype,
            stage=stage,
            blocks=count,
            optimizer=optimizer if layout.fsdp else None,
            steady=steady,
            target=target,
            capability=capability,
        )
        for count in blocks
    ]
    totals = [_totals(run) for run in runs]
    keys = set().union(*totals)
    return StageRuns(
        totals={
            key: _extrapolate([t.get(key, 0) for t in totals], blocks, per_stage) for key in keys
        },
        start=_extrapolate([r.start for r in runs], blocks, per_stage),
        forward_backward=_extrapolate([r.forward_backward for r in runs], blocks, per_stage),
        steady=_extrapolate([r.steady for r in runs], blocks, per_stage),
        step=_extrapolate([r.step for r in runs], blocks, per_stage),
        uncounted=frozenset().union(*(r.uncounted for r in runs)),
        assumed=tuple(dict.fromkeys(note for r in runs for note in r.assumed)),
    )


def whole(value: float) -> float:
    """``value`` as an int where it is one (bytes, FLOPs), for exact comparisons."""
    return int(value) if float(value).is_integer() else value


class Composer:
    """Rank 0's figures for a whole step, from one microbatch's (numbers and formulas)."""

    def __init__(
        self,
        fitted: Mapping[str, Fitted],
        runs: StageRuns,
        layout: ParallelLayout,
        dims: Mapping[str, int],
    ) -> None:
        self.fitted, self.runs, self.layout, self.dims = fitted, runs, layout, dims
        self.formulas = bool(fitted)  # none asked for: figures are numbers only
        n_layers, pp, dp, micro = _symbols("n_layers", "pp", "dp", "microbatches")
        self.blocks = n_layers / pp
        self.local = {sympy.Symbol("batch"): sympy.Symbol("batch") / (dp * micro)}
        self.values = {sympy.Symbol(k): v for k, v in dims.items()}

    def microbatch(self, key: str) -> tuple[float, sympy.Expr | None]:
        """A figure per microbatch: its value at the planned sizes, its formula."""
        value = self.runs.totals.get(key, 0.0)
        found = self.fitted.get(key)
        if found is None:
            return value, sympy.Integer(0) if not value else None
        return value, sympy.expand(found.stage(self.blocks).xreplace(self.local))

    def figure(self, value: float, formula: sympy.Expr | None, source: str) -> Figure:
        """A figure, exact when its formula gives its value at the planned sizes."""
        value = whole(value)
        if formula is None:
            return Figure(value, None, source, exact=not self.formulas)
        at = formula.xreplace(self.values)
        exact = bool(sympy.simplify(at - sympy.nsimplify(value)) == 0)
        return Figure(
            value, sympy.factor(formula) if formula.free_symbols else formula, source, exact
        )


@dataclass(frozen=True)
class Held:
    """What a rank keeps through the step besides torch's run: closed-form shards."""

    elements: float
    elements_formula: sympy.Expr | None
    master: tuple[float, sympy.Expr | None] | None
    optimizer: tuple[float, sympy.Expr | None]
    gradients_after: float
    temporary: float
    peak_source: str


def held_states(
    composer: Composer, layout: ParallelLayout, dtype: torch.dtype, optimizer: str | None
) -> Held:
    size = torch.empty((), dtype=dtype).element_size()
    states = OPTIMIZER_STATES[optimizer]
    parameter_bytes, parameter_formula = composer.microbatch("parameter_bytes")
    gradient_bytes, _ = composer.microbatch("gradient_bytes")
    if layout.fsdp:
        opt_value, _ = composer.microbatch("optimizer_bytes")
        formula = None if parameter_formula is None else states * parameter_formula
        return Held(0, None, None, (opt_value, formula), gradient_bytes, 0, "torch")
    mixed = dtype in _SIXTEEN_BIT
    elements = parameter_bytes / size
    elements_formula = None if parameter_formula is None else parameter_formula / size
    shards = sympy.Symbol("dp") if layout.zero >= 1 else sympy.Integer(1)
    ranks = layout.dp if layout.zero >= 1 else 1
    state_size = 4 if mixed else size

    def part(per_element: int) -> tuple[float, sympy.Expr | None]:
        value = per_element * elements / ranks
        formula = None if elements_formula is None else per_element * elements_formula / shards
        return value, formula

    master = part(4) if mixed else None
    after = gradient_bytes / (layout.dp if layout.zero >= 2 else 1)
    return Held(
        elements,
        elements_formula,
        master,
        part(states * state_size),
        after,
        state_size * elements / ranks if states else 0,
        "torch + closed form",
    )


def peak(runs: StageRuns, layout: ParallelLayout, held: Held, in_flight: int) -> float:
    """The most a rank holds: the run's peak with the microbatches it keeps in flight
    (measured with at most two, each more adds one microbatch's activations and output),
    and the closed-form shards it keeps besides; or the optimizer's step, if more."""
    running = float(runs.forward_backward)
    if layout.microbatches > 1:
        per_microbatch = runs.totals.get("activation_bytes", 0) + runs.totals.get("output_bytes", 0)
        running = max(running, runs.steady + max(0, in_flight - 2) * per_microbatch)
    if layout.fsdp:
        return max(running, runs.step)
    extra = held.optimizer[0] + (held.master[0] if held.master else 0)
    stepping = (
        runs.start + held.gradients_after + extra + held.temporary
    )  # weights, gradients, state, and a temporary the size of one state tensor
    return max(running + extra, stepping)


def figures(composer: Composer, layout: ParallelLayout, held: Held) -> dict[str, Figure]:
    micro = sympy.Symbol("microbatches")
    count = layout.microbatches
    found: dict[str, Figure] = {}
    for key in ("parameter_bytes", "gradient_bytes"):
        value, formula = composer.microbatch(key)
        source = "torch"
        if key == "gradient_bytes" and layout.zero == 2 and not layout.fsdp:
            value, formula = (
                value / layout.dp,
                None if formula is None else formula / sympy.Symbol("dp"),
            )
            source = "torch + closed form"
        found[key] = composer.figure(value, formula, source)
    if held.master is not None:
        found["master_weight_bytes"] = composer.figure(*held.master, "closed form")
    found["optimizer_bytes"] = composer.figure(
        *held.optimizer, "torch" if layout.fsdp else "closed form"
    )
    act, act_formula = composer.microbatch("activation_bytes")
    out, out_formula = composer.microbatch("output_bytes")
    flight = layout.in_flight_formula()
    formula = (
        None if act_formula is None or out_formula is None else flight * (act_formula + out_formula)
    )
    found["activation_bytes"] = composer.figure(layout.in_flight * (act + out), formula, "torch")
    for key in ("forward_flops", "backward_flops", "recompute_flops"):
        value, formula = composer.microbatch(key)
        found[key] = composer.figure(
            count * value, None if formula is None else micro * formula, "torch"
        )
    value, formula = composer.microbatch("matmul_flops")
    found["model_flops"] = composer.figure(
        palm_model_flops(count * value),
        None if formula is None else palm_model_flops(micro * formula),
        "torch",
    )
    return found


def communication(composer: Composer, layout: ParallelLayout) -> dict[str, Figure]:
    micro = sympy.Symbol("microbatches")
    found: dict[str, Figure] = {}
    for key in sorted(k for k in composer.runs.totals if k.startswith("comm:")):
        value, formula = composer.microbatch(key)
        name = key.removeprefix("comm:")
        found[name] = composer.figure(
            layout.microbatches * value, None if formula is None else micro * formula, "torch"
        )
    if layout.dp > 1 and not layout.fsdp:
        # the whole step's gradients, once (accumulated over the microbatches); ZeRO 1 and
        # 2 reduce-scatter them, then gather the updated 16-bit weights
        gradients = composer.microbatch("gradient_bytes")
        if layout.zero == 0:
            found["all_reduce/dp"] = composer.figure(*gradients, "closed form")
        else:
            found["reduce_scatter/dp"] = composer.figure(*gradients, "closed form")
            weights = composer.microbatch("parameter_bytes")
            found["all_gather/dp"] = composer.figure(*weights, "closed form")
    if layout.pp > 1:
        value, formula = composer.microbatch("output_bytes")
        for kind in ("send", "recv"):
            found[f"{kind}/pp"] = composer.figure(
                layout.microbatches * value,
                None if formula is None else micro * formula,
                "torch + closed form",
            )
    return found
