"""A training step planned per rank: what each rank holds, computes and moves, and its time.

:func:`plan_parallel` splits the model as torch would (:mod:`.rank_run`: tensor and sequence
parallelism with ``torch.distributed.tensor.parallel``, ZeRO stage 3 with ``fully_shard``,
under a fake process group) and dry-runs rank 0's step:

- at the planned sizes, with the first stage's blocks (two or three of them, the rest by
  difference: every block does the same), for the numbers and the peak;
- at small sizes, one block, changing each size in turn, for the formulas (:mod:`.rank_fit`),
  which are checked against the numbers.

What torch's run gives: the rank's parameters, gradients, activations (per microbatch),
FLOPs, tensor-parallel and FSDP collectives, the peak, and (stage 3) the optimizer's state.
What closed forms give (:mod:`.zero`, Narayanan et al. 2021): ZeRO stages 1 and 2 (the
optimizer state, the fp32 master weights and, stage 2, the gradients, divided by ``dp``),
the data-parallel gradient collectives of stages 0 to 2, pipeline sends and receives (the
stage's output, both ways, per microbatch), the microbatches 1F1B holds, and the time
(:mod:`.rank_time`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from .. import devices
from ..devices import DeviceSpec
from ..errors import SpecError
from ..nn import TransformerConfig
from .layout import ParallelLayout
from .rank_fit import Fitted, figures_of, fit_rank
from .rank_run import RankRun, StageKind, rank_run
from .rank_time import RankTime, rank_time
from .training import OPTIMIZER_STATES, optimizer_key

__all__ = ["Figure", "ParallelPlan", "plan_parallel"]

_SIXTEEN_BIT = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Figure:
    """One per-rank figure: its value, its formula (None where there is none) and where
    it comes from (``"torch"``: the sharded dry run; ``"closed form"``; or both)."""

    value: float
    formula: sympy.Expr | None
    source: str
    exact: bool = True

    def to_dict(self) -> dict[str, Any]:
        """``{"value", "formula", "source", "exact"}``, JSON-ready."""
        value: float | int = int(self.value) if float(self.value).is_integer() else self.value
        return {
            "value": value,
            "formula": None if self.formula is None else str(self.formula),
            "source": self.source,
            "exact": self.exact,
        }


@dataclass(frozen=True)
class ParallelPlan:
    """A step of ``model`` at ``batch`` x ``seq`` (the whole batch, all ranks) on
    ``layout`` over devices ``device``: rank 0's figures (:attr:`per_rank`,
    :attr:`communication`), the other pipeline stage's (:attr:`last_stage`, numbers), the
    step's time (None on a device without a promised peak: ``"cpu"``), and the sizes the
    formulas are in (:attr:`dims`)."""

    model: str
    config: TransformerConfig
    batch: int
    seq: int
    layout: ParallelLayout
    device: DeviceSpec
    dtype: torch.dtype
    optimizer: str | None
    parameters: Figure
    per_rank: Mapping[str, Figure]
    communication: Mapping[str, Figure]
    time: RankTime | None
    dims: Mapping[str, int]
    capacity: int | None
    last_stage: Mapping[str, float] = field(default_factory=dict)

    @property
    def peak(self) -> float:
        """The most any rank holds at once (the first or the last pipeline stage)."""
        return max(self.per_rank["peak_bytes"].value, self.last_stage.get("peak_bytes", 0.0))

    @property
    def fits(self) -> bool | None:
        """Whether every rank's peak fits the device's memory (None when unknown)."""
        return None if self.capacity is None else self.peak <= self.capacity

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the layout, ``parameters``, ``per_rank`` (each figure with
        its formula), the time, the dims of the formulas."""
        per_rank: dict[str, Any] = {k: f.to_dict() for k, f in self.per_rank.items()}
        per_rank["communication_bytes"] = {k: f.to_dict() for k, f in self.communication.items()}
        timing = self.time
        per_rank["step_seconds"] = {
            "value": None if timing is None else timing.seconds,
            "formula": None if timing is None or timing.formula is None else str(timing.formula),
            "source": "closed form",
            "exact": True,
        }
        return {
            "model": self.model,
            "batch": self.batch,
            "seq": self.seq,
            "dtype": str(self.dtype).removeprefix("torch."),
            "optimizer": self.optimizer,
            "device": self.device.name,
            "layout": self.layout.to_dict(),
            "parameters": self.parameters.to_dict(),
            "per_rank": per_rank,
            "last_stage": dict(self.last_stage),
            "time": None if timing is None else timing.to_dict(),
            "device_memory_bytes": self.capacity,
            "fits": self.fits,
            "dims": dict(self.dims),
        }


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
class _StageRuns:
    """Runs of one stage at the planned sizes, extrapolated to its blocks."""

    totals: dict[str, float]
    start: float
    forward_backward: float
    steady: float
    step: float
    uncounted: frozenset[str]


def _stage_runs(
    config: TransformerConfig,
    layout: ParallelLayout,
    micro: int,
    seq: int,
    dtype: torch.dtype,
    stage: StageKind,
    optimizer: str | None,
    target: str,
) -> _StageRuns:
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
        )
        for count in blocks
    ]
    totals = [_totals(run) for run in runs]
    keys = set().union(*totals)
    return _StageRuns(
        totals={
            key: _extrapolate([t.get(key, 0) for t in totals], blocks, per_stage) for key in keys
        },
        start=_extrapolate([r.start for r in runs], blocks, per_stage),
        forward_backward=_extrapolate([r.forward_backward for r in runs], blocks, per_stage),
        steady=_extrapolate([r.steady for r in runs], blocks, per_stage),
        step=_extrapolate([r.step for r in runs], blocks, per_stage),
        uncounted=frozenset().union(*(r.uncounted for r in runs)),
    )


def _config_of(model: str | TransformerConfig) -> tuple[str, TransformerConfig]:
    from ..nn import CONFIGS

    if isinstance(model, TransformerConfig):
        return "custom", model
    if model not in CONFIGS:
        raise SpecError.at(None, f"unknown model {model!r}", hint=f"known: {', '.join(CONFIGS)}")
    return model, CONFIGS[model]


def _check(config: TransformerConfig, layout: ParallelLayout, batch: int, seq: int) -> None:
    where = "plan_parallel()"
    for label, value in (("batch", batch), ("seq", seq)):
        if type(value) is not int or value < 1:
            raise SpecError.at(where, f"{label}={value!r} is not a size >= 1")
    if seq > config.context:
        raise SpecError.at(where, f"seq={seq} is longer than the model's context {config.context}")
    if batch % (layout.dp * layout.microbatches):
        raise SpecError.at(
            where,
            f"batch={batch} does not split into dp={layout.dp} x microbatches="
            f"{layout.microbatches} equal microbatches",
        )
    if config.n_layers % layout.pp:
        raise SpecError.at(
            where, f"pp={layout.pp} stages do not divide n_layers={config.n_layers} blocks"
        )
    # The vocabulary may split unevenly (torch gives the first ranks a row more).
    sizes = {"n_heads": config.n_heads, "d_ff": config.d_ff}
    if layout.sp:
        sizes["seq"] = seq
    for name, size in sizes.items():
        if size % layout.tp:
            raise SpecError.at(
                where,
                f"tp={layout.tp} does not divide {name}={size}",
                hint="tensor parallelism splits the heads and d_ff"
                + (" (and, with sp, the sequence)" if layout.sp else ""),
            )


def _spec(device: str | DeviceSpec) -> DeviceSpec:
    if isinstance(device, DeviceSpec):
        return device
    if device == "cpu":  # the CPU's kernels, without a time (no promised peak)
        return DeviceSpec("cpu", {}, None, "this machine's CPU kernels, no peak", kind="cpu")
    found = devices.lookup(device)
    if found is None:
        raise SpecError.at(None, f"unknown device {device!r}: {devices.explain(device)}")
    return found


class _Composer:
    """Rank 0's figures for a whole step, from one microbatch's (numbers and formulas)."""

    def __init__(
        self,
        fitted: Mapping[str, Fitted],
        runs: _StageRuns,
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
        if formula is None:
            return Figure(value, None, source, exact=not self.formulas)
        at = formula.xreplace(self.values)
        exact = bool(sympy.simplify(at - sympy.nsimplify(value)) == 0)
        return Figure(
            value, sympy.factor(formula) if formula.free_symbols else formula, source, exact
        )


def plan_parallel(
    model: str | TransformerConfig,
    batch: int,
    seq: int,
    device: str | DeviceSpec = "H100 SXM",
    layout: ParallelLayout | None = None,
    *,
    dtype: torch.dtype = torch.bfloat16,
    optimizer: str | None = "adamw",
    mfu: float = 0.4,
    formulas: bool = True,
) -> ParallelPlan:
    """Plan one training step of ``model`` (a name of :data:`typedflops.nn.CONFIGS` or a
    config) over ``layout``'s ranks of ``device``: ``batch`` sequences of ``seq`` tokens in
    all (each data-parallel rank takes ``batch / dp``, in ``layout.microbatches``).

    >>> step = plan_parallel("gpt2", 16, 1024, "H100 SXM", ParallelLayout(dp=2, tp=2))
    >>> step.per_rank["parameter_bytes"].formula
    2*d_model*(context*tp + 2*n_layers*(2*d_ff + 4*d_head*n_heads + ... )/tp
    """
    name, config = _config_of(model)
    layout = layout or ParallelLayout()
    if layout.checkpoint and not config.checkpoint:
        config = _with_checkpoint(config)
    _check(config, layout, batch, seq)
    key = optimizer_key(optimizer, "plan_parallel()")
    if not 0.0 < mfu <= 1.0:
        raise SpecError.at("plan_parallel()", f"mfu={mfu!r} must be in (0, 1]")
    spec = _spec(device)
    peak = spec.peak(dtype)
    if peak is None and spec.kind != "cpu":
        raise SpecError.at("plan_parallel()", f"{spec.name} has no {dtype} peak ({spec.source})")
    target = "cpu" if spec.kind == "cpu" else "cuda"
    micro = batch // (layout.dp * layout.microbatches)
    stage: StageKind = "first" if layout.pp > 1 else "whole"
    fitted = fit_rank(config, layout, dtype, stage=stage, target=target) if formulas else {}
    runs = _stage_runs(config, layout, micro, seq, dtype, stage, key, target)
    dims = {**config.sizes, "batch": batch, "seq": seq, **layout.sizes()}
    composer = _Composer(fitted, runs, layout, dims)
    held = _held(composer, layout, dtype, key)
    figures = _figures(composer, layout, held)
    communication = _communication(composer, layout)
    peak_bytes = _peak(runs, layout, held, layout.in_flight)
    figures["peak_bytes"] = Figure(peak_bytes, None, held.peak_source)
    last: dict[str, float] = {}
    if layout.pp > 1:
        tail = _stage_runs(config, layout, micro, seq, dtype, "last", key, target)
        tail_held = _held(_Composer({}, tail, layout, dims), layout, dtype, key)
        last = {
            "forward_flops": layout.microbatches * tail.totals.get("forward_flops", 0),
            "backward_flops": layout.microbatches * tail.totals.get("backward_flops", 0),
            "model_flops": 3 * layout.microbatches * tail.totals.get("matmul_flops", 0),
            "activation_bytes": tail.totals.get("activation_bytes", 0),
            "peak_bytes": _peak(tail, layout, tail_held, 1),
        }
    model_flops = figures["model_flops"]
    slowest = max(model_flops.value, last.get("model_flops", 0.0))
    timing = (
        None
        if peak is None
        else rank_time(
            layout,
            spec,
            peak,
            mfu,
            slowest,
            {k: f.value for k, f in communication.items()},
            model_flops.formula if slowest == model_flops.value else None,
            {k: f.formula for k, f in communication.items()},
        )
    )
    from .planner import device_memory

    found = device_memory(spec)
    return ParallelPlan(
        model=name,
        config=config,
        batch=batch,
        seq=seq,
        layout=layout,
        device=spec,
        dtype=dtype,
        optimizer=key,
        parameters=_parameter_count(config),
        per_rank=figures,
        communication=communication,
        time=timing,
        dims=dims,
        capacity=None if found is None else found[0],
        last_stage=last,
    )


def _with_checkpoint(config: TransformerConfig) -> TransformerConfig:
    return dataclasses.replace(config, checkpoint=True)


def _parameter_count(config: TransformerConfig) -> Figure:
    from ..nn import TransformerLM
    from .training import parameter_count

    with torch.device("meta"):
        count = parameter_count(TransformerLM(config))
    return Figure(count.total, count.formula, "torch")


@dataclass(frozen=True)
class _Held:
    """What a rank keeps through the step besides torch's run: closed-form shards."""

    elements: float
    elements_formula: sympy.Expr | None
    master: tuple[float, sympy.Expr | None] | None
    optimizer: tuple[float, sympy.Expr | None]
    gradients_after: float
    temporary: float
    peak_source: str


def _held(
    composer: _Composer, layout: ParallelLayout, dtype: torch.dtype, optimizer: str | None
) -> _Held:
    size = torch.empty((), dtype=dtype).element_size()
    states = OPTIMIZER_STATES[optimizer]
    parameter_bytes, parameter_formula = composer.microbatch("parameter_bytes")
    gradient_bytes, _ = composer.microbatch("gradient_bytes")
    if layout.fsdp:
        opt_value, _ = composer.microbatch("optimizer_bytes")
        formula = None if parameter_formula is None else states * parameter_formula
        return _Held(0, None, None, (opt_value, formula), gradient_bytes, 0, "torch")
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
    return _Held(
        elements,
        elements_formula,
        master,
        part(states * state_size),
        after,
        state_size * elements / ranks if states else 0,
        "torch + closed form",
    )


def _peak(runs: _StageRuns, layout: ParallelLayout, held: _Held, in_flight: int) -> float:
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


def _figures(composer: _Composer, layout: ParallelLayout, held: _Held) -> dict[str, Figure]:
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
    for key in ("forward_flops", "backward_flops", "recompute_flops", "matmul_flops"):
        value, formula = composer.microbatch(key)
        name = "model_flops" if key == "matmul_flops" else key
        scale = 3 if key == "matmul_flops" else 1
        found[name] = composer.figure(
            scale * count * value, None if formula is None else scale * micro * formula, "torch"
        )
    return found


def _communication(composer: _Composer, layout: ParallelLayout) -> dict[str, Figure]:
    micro = sympy.Symbol("microbatches")
    found: dict[str, Figure] = {}
    for key in sorted(k for k in composer.runs.totals if k.startswith("comm:")):
        value, formula = composer.microbatch(key)
        name = key.removeprefix("comm:")
        found[name] = composer.figure(
            layout.microbatches * value, None if formula is None else micro * formula, "torch"
        )
    if layout.dp > 1 and not layout.fsdp:
        # the whole step's gradients, once (accumulated over the microbatches)
        value, formula = composer.microbatch("gradient_bytes")
        kinds = ("all_reduce",) if layout.zero == 0 else ("reduce_scatter", "all_gather")
        for kind in kinds:
            found[f"{kind}/dp"] = composer.figure(value, formula, "closed form")
    if layout.pp > 1:
        value, formula = composer.microbatch("output_bytes")
        for kind in ("send", "recv"):
            found[f"{kind}/pp"] = composer.figure(
                layout.microbatches * value,
                None if formula is None else micro * formula,
                "torch + closed form",
            )
    return found
