"""A training step planned per rank: what each rank holds, computes and moves, and its time.

:func:`plan_parallel` splits the model as torch would (:mod:`.rank_run`: tensor and sequence
parallelism with ``torch.distributed.tensor.parallel``, ZeRO stage 3 with ``fully_shard``,
under a fake process group) and dry-runs rank 0's step:

- at the planned sizes, with the stage's blocks (three and four of them when it has more,
  the rest by difference: every further block does the same), for the numbers and the peak;
- at small sizes, with one block and with two, changing each size in turn, for the formulas
  (:mod:`.rank_fit`), which are checked against the numbers (``Figure.exact``).

Which figures come from torch's run and which from closed forms: :mod:`.rank_compose`; the
time: :mod:`.rank_time`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import devices
from ..cost.types import palm_model_flops
from ..devices import DeviceSpec
from ..errors import SpecError
from ..nn import TransformerConfig
from ..text import dtype_name, format_count, text_table, wrap_lines
from . import rank_compose as compose
from .collectives import bus_fraction
from .figure import Figure
from .layout import ParallelLayout
from .plan_report import caveats
from .rank_fit import fit_rank
from .rank_run import StageKind
from .rank_time import RankTime, rank_time
from .training import PLANNED_DEVICE, optimizer_key

__all__ = ["ParallelPlan", "plan_parallel"]


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
    #: Ops without a rule (counted 0) and what was taken as given where values decide the
    #: work, over every stage's runs.
    uncounted: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()

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
            "dtype": dtype_name(self.dtype),
            "optimizer": self.optimizer,
            "device": self.device.name,
            "layout": self.layout.to_dict(),
            "parameters": int(self.parameters.value),
            "parameters_formula": str(self.parameters.formula),
            "per_rank": per_rank,
            "last_stage": dict(self.last_stage),
            "time": None if timing is None else timing.to_dict(),
            "device_memory_bytes": self.capacity,
            "fits": self.fits,
            "dims": dict(self.dims),
            "uncounted": list(self.uncounted),
            "assumed": list(self.assumed),
        }

    def text(self) -> str:
        """The plan as a report: the layout, rank 0's memory by term (and where each figure
        comes from), whether it fits, FLOPs, each collective's bytes and link, the step's
        time by part, then every figure's formula."""
        layout, config, per_rank = self.layout, self.config, self.per_rank
        kind = "LLaMA style" if config.positions == "rope" else "GPT-2 style"
        lines = [
            f"{self.model} ({kind}: {config.n_layers} layers, d_model {config.d_model}, "
            f"{config.n_heads} heads of {config.d_head}, d_ff {config.d_ff}, vocab "
            f"{config.vocab}; {format_count(self.parameters.value)} parameters)",
            f"one step: batch {self.batch} x seq {self.seq}, "
            f"{str(self.dtype).removeprefix('torch.')}, {self.optimizer or 'no optimizer'}, on "
            f"{layout.world} x {self.device.name}",
            f"layout: {layout.describe()}; rank 0 runs "
            + (
                f"the first of {layout.pp} stages, {layout.in_flight} microbatches in flight"
                if layout.pp > 1
                else "the whole model"
            ),
            "",
        ]
        rows = [
            [key.removesuffix("_bytes").replace("_", " "), _gb(figure.value), figure.source]
            for key, figure in per_rank.items()
            if key.endswith("_bytes")
        ]
        lines.append(text_table(["rank 0", "GB", "from"], rows, right={1}))
        if self.capacity is not None:
            verdict = "yes" if self.fits else "NO"
            lines.append(
                f"fits in {self.device.name}'s {_gb(self.capacity)} GB: {verdict} "
                f"(rank 0 peaks at {per_rank['peak_bytes'].value / self.capacity:.0%} of it"
                + (
                    f", the last stage at {self.last_stage['peak_bytes'] / self.capacity:.0%})"
                    if self.last_stage
                    else ")"
                )
            )
        flops = ", ".join(
            f"{key.removesuffix('_flops')} {format_count(per_rank[key].value)}"
            for key in ("forward_flops", "backward_flops", "recompute_flops", "model_flops")
            if per_rank[key].value
        )
        lines += ["", f"FLOPs a step on rank 0: {flops}", *caveats(self.uncounted, self.assumed)]
        if self.communication:
            lines += ["", self._communication_table()]
        if self.time is not None:
            timing = self.time
            lines += [
                "",
                f"step time: {_seconds(timing.seconds)} at {timing.mfu:.0%} MFU: compute "
                f"{_seconds(timing.compute)}, tensor parallel {_seconds(timing.tensor_parallel)}, "
                f"pipeline transfers {_seconds(timing.pipeline)}, 1F1B bubble "
                f"{_seconds(timing.bubble)}, data parallel {_seconds(timing.data_parallel)} "
                f"({_seconds(timing.exposed_data_parallel)} not hidden under compute)",
                "  tensor-parallel and pipeline transfers wait; data-parallel ones overlap compute",
            ]
        shown = ", ".join(f"{name}={size}" for name, size in self.dims.items())
        lines += ["", f"formulas, in {shown}:"]
        prose = wrap_lines("\n".join(lines), 100)
        # Everything fits 100 columns; --json has each formula on one line, to be copied.
        formulas = [
            wrap_lines(f"  {key}: {'' if figure.exact else '~ '}{figure.formula}", 100)
            for key, figure in (*per_rank.items(), *self.communication.items())
            if figure.formula is not None
        ]
        return "\n".join([prose, *formulas])

    def _communication_table(self) -> str:
        rows = []
        for key, figure in self.communication.items():
            kind, _, group = key.partition("/")
            ranks = {"tp": self.layout.tp, "dp": self.layout.dp, "pp": 2}.get(group, 1)
            wire = float(bus_fraction(kind, ranks)) * figure.value
            link = "" if self.time is None else self.time.links.get(group, ("", None))[0]
            rows.append([f"{kind} ({group})", _gb(figure.value), _gb(wire), link, figure.source])
        header = ["communication a step", "GB", "on the wire", "link", "from"]
        return text_table(header, rows, right={1, 2})


def _gb(value: float) -> str:
    return f"{value / 1e9:.2f}"


def _seconds(value: float) -> str:
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"


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
    if device == "cpu":  # the CPU's kernels, without a time (no promised peak)
        return DeviceSpec("cpu", {}, None, "this machine's CPU kernels, no peak", kind="cpu")
    return devices.resolve(device)


def plan_parallel(
    model: str | TransformerConfig,
    batch: int,
    seq: int,
    device: str | DeviceSpec = PLANNED_DEVICE,
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

    >>> layout = ParallelLayout(dp=2, zero=1)
    >>> step = plan_parallel("gpt2", 16, 1024, "H100 SXM", layout, formulas=False)
    >>> step.per_rank["optimizer_bytes"].value == 8 * step.parameters.value // 2  # Adam, fp32
    True
    >>> step.communication["reduce_scatter/dp"].value  # the bf16 gradients, once a step
    248879616
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
    peak_flops = spec.peak(dtype)
    if peak_flops is None and spec.kind != "cpu":
        raise SpecError.at("plan_parallel()", f"{spec.name} has no {dtype} peak ({spec.source})")
    target = "cpu" if spec.kind == "cpu" else "cuda"
    gpu = spec.capability  # torch's attention kernel on it depends on it
    micro = batch // (layout.dp * layout.microbatches)
    stage: StageKind = "first" if layout.pp > 1 else "whole"
    fitted = (
        fit_rank(config, layout, dtype, stage=stage, target=target, capability=gpu)
        if formulas
        else {}
    )
    runs = compose.stage_runs(config, layout, micro, seq, dtype, stage, key, target, gpu)
    dims = {**config.sizes, "batch": batch, "seq": seq, **layout.sizes()}
    composer = compose.Composer(fitted, runs, layout, dims)
    held = compose.held_states(composer, layout, dtype, key)
    per_rank = compose.figures(composer, layout, held)
    moved = compose.communication(composer, layout)
    most = compose.whole(compose.peak(runs, layout, held, layout.in_flight))
    per_rank["peak_bytes"] = Figure(most, None, held.peak_source)
    last: dict[str, float] = {}
    uncounted, assumed = set(runs.uncounted), dict.fromkeys(runs.assumed)
    if layout.pp > 1:
        tail = compose.stage_runs(config, layout, micro, seq, dtype, "last", key, target, gpu)
        tail_held = compose.held_states(
            compose.Composer({}, tail, layout, dims), layout, dtype, key
        )
        uncounted |= tail.uncounted
        assumed.update(dict.fromkeys(tail.assumed))
        count = layout.microbatches
        last = {
            "forward_flops": count * tail.totals.get("forward_flops", 0),
            "backward_flops": count * tail.totals.get("backward_flops", 0),
            "model_flops": palm_model_flops(count * tail.totals.get("matmul_flops", 0)),
            "activation_bytes": tail.totals.get("activation_bytes", 0),
            "peak_bytes": compose.whole(compose.peak(tail, layout, tail_held, 1)),
        }
    model_flops = per_rank["model_flops"]
    slowest = max(model_flops.value, last.get("model_flops", 0.0))
    timing = None
    if peak_flops is not None:
        timing = rank_time(
            layout,
            spec,
            peak_flops,
            mfu,
            slowest,
            {k: f.value for k, f in moved.items()},
            model_flops.formula if slowest == model_flops.value else None,
            {k: f.formula for k, f in moved.items()},
        )
    memory = spec.memory
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
        per_rank=per_rank,
        communication=moved,
        time=timing,
        dims=dims,
        capacity=None if memory is None else int(memory),
        last_stage=last,
        uncounted=tuple(sorted(uncounted)),
        assumed=tuple(assumed),
    )


def _with_checkpoint(config: TransformerConfig) -> TransformerConfig:
    return dataclasses.replace(config, checkpoint=True)


def _parameter_count(config: TransformerConfig) -> Figure:
    from ..nn import TransformerLM
    from .training import parameter_count

    with torch.device("meta"):
        count = parameter_count(TransformerLM(config))
    return Figure(count.total, count.formula, "torch")
