"""How long one training step takes on each rank: compute, communication and the pipeline.

- Compute: the rank's model FLOPs (PaLM's: 3x the forward's matrix products) at ``mfu``
  times the device's dense peak, for the slowest pipeline stage.
- Communication: each collective's bus bytes (:func:`~.collectives.bus_fraction`: ring
  algorithms, ``2(n-1)/n`` of the buffer for an all-reduce) at the bandwidth of the link its
  group crosses, per direction: NVLink where the group's ranks share a node (a group of
  ``tp`` ranks is ``tp`` neighbours; data-parallel peers are ``tp`` apart, pipeline stages
  ``tp * dp`` apart), else the node's InfiniBand per GPU (figures in
  :mod:`typedflops.devices.gpus`).
- Overlap, as Megatron-LM runs: tensor-parallel and pipeline transfers wait for each
  other and for compute (none hidden); data-parallel collectives (gradient reduction,
  FSDP's gathers) overlap compute fully, and only what they take beyond it adds to the step.
- 1F1B runs ``microbatches + pp - 1`` microbatch slots (Narayanan et al. 2021): the
  ``(pp - 1) / microbatches`` bubble.

``seconds = (compute + tp + pp) * (1 + (pp - 1) / microbatches) + max(0, dp - compute)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sympy

from ..devices import DeviceSpec
from .collectives import bus_fraction
from .layout import ParallelLayout

__all__ = ["RankTime", "link_of", "rank_time"]


def link_of(group: str, layout: ParallelLayout, spec: DeviceSpec) -> tuple[str, float | None]:
    """The link a mesh dimension's collectives cross (``"NVLink"``, ``"InfiniBand"``) and
    its bandwidth per direction in bytes/s (None when the device has no figure).

    >>> from typedflops import devices
    >>> h100, layout = devices.lookup("H100 SXM"), ParallelLayout(tp=8, dp=2)
    >>> link_of("tp", layout, h100), link_of("dp", layout, h100)
    (('NVLink', 450000000000.0), ('InfiniBand', 50000000000.0))
    """
    node = spec.gpus_per_node or 1
    span = {"tp": layout.tp, "dp": layout.tp * layout.dp, "pp": layout.world}.get(group, 1)
    if span <= node and spec.nvlink:
        return "NVLink", spec.nvlink
    return "InfiniBand", spec.infiniband


@dataclass(frozen=True)
class RankTime:
    """One step's time on the slowest rank, by part (seconds), and the links used."""

    compute: float
    tensor_parallel: float
    pipeline: float
    data_parallel: float
    bubble: float
    seconds: float
    formula: sympy.Expr | None
    mfu: float
    peak_flop_per_sec: float
    links: Mapping[str, tuple[str, float | None]]

    @property
    def exposed_data_parallel(self) -> float:
        """Data-parallel communication beyond the compute it overlaps."""
        return max(0.0, self.data_parallel - self.compute)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "seconds": self.seconds,
            "compute_seconds": self.compute,
            "tensor_parallel_seconds": self.tensor_parallel,
            "pipeline_seconds": self.pipeline,
            "data_parallel_seconds": self.data_parallel,
            "exposed_data_parallel_seconds": self.exposed_data_parallel,
            "bubble_seconds": self.bubble,
            "mfu": self.mfu,
            "peak_flop_per_sec": self.peak_flop_per_sec,
            "links": {
                group: {"link": name, "bytes_per_sec": rate}
                for group, (name, rate) in self.links.items()
            },
            "formula": None if self.formula is None else str(self.formula),
        }


def _group_kind(key: str) -> tuple[str, str]:
    kind, _, group = key.partition("/")
    return kind, group


def _ranks(group: str, layout: ParallelLayout) -> int:
    return {"tp": layout.tp, "dp": layout.dp, "pp": 2}.get(group, 1)


def _ranks_symbol(group: str) -> sympy.Expr:
    return {"tp": sympy.Symbol("tp"), "dp": sympy.Symbol("dp")}.get(group, sympy.Integer(2))


def rank_time(
    layout: ParallelLayout,
    spec: DeviceSpec,
    peak: float,
    mfu: float,
    model_flops: float,
    communication: Mapping[str, float],
    model_flops_formula: sympy.Expr | None = None,
    communication_formulas: Mapping[str, sympy.Expr | None] | None = None,
) -> RankTime:
    """The step's time from the slowest stage's ``model_flops`` and the bytes of each
    collective kind on each mesh dimension (``"all_reduce/tp"``: bytes), with the formula
    in the same sizes where every part has one."""
    links = {group: link_of(group, layout, spec) for group in ("tp", "dp", "pp")}
    seconds_by_group = {"tp": 0.0, "dp": 0.0, "pp": 0.0}
    formula_by_group: dict[str, sympy.Expr] = {g: sympy.Integer(0) for g in seconds_by_group}
    formulas = communication_formulas or {}
    complete = model_flops_formula is not None
    for key, moved in communication.items():
        kind, group = _group_kind(key)
        if group not in seconds_by_group:
            continue
        _, rate = links[group]
        if not rate:
            continue
        share = bus_fraction(kind, _ranks(group, layout))
        seconds_by_group[group] += float(share) * moved / rate
        moved_formula = formulas.get(key)
        if moved_formula is None:
            complete = False
            continue
        share_formula = _bus_formula(kind, _ranks_symbol(group))
        formula_by_group[group] += share_formula * moved_formula / sympy.Float(rate)
    compute = model_flops / (mfu * peak)
    slots = 1 + (layout.pp - 1) / layout.microbatches
    serial = compute + seconds_by_group["tp"] + seconds_by_group["pp"]
    exposed = max(0.0, seconds_by_group["dp"] - compute)
    total = serial * slots + exposed
    formula: sympy.Expr | None = None
    if complete and model_flops_formula is not None:
        pp, micro = sympy.Symbol("pp"), sympy.Symbol("microbatches")
        compute_f = model_flops_formula / sympy.Float(mfu * peak)
        serial_f = compute_f + formula_by_group["tp"] + formula_by_group["pp"]
        formula = serial_f * (1 + (pp - 1) / micro) + sympy.Max(
            0, formula_by_group["dp"] - compute_f
        )
    return RankTime(
        compute=compute,
        tensor_parallel=seconds_by_group["tp"],
        pipeline=seconds_by_group["pp"],
        data_parallel=seconds_by_group["dp"],
        bubble=serial * (slots - 1),
        seconds=total,
        formula=formula,
        mfu=mfu,
        peak_flop_per_sec=peak,
        links=links,
    )


def _bus_formula(kind: str, ranks: sympy.Expr) -> sympy.Expr:
    if kind == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    return sympy.Integer(1)
