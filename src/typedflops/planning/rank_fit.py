"""A rank's figures as formulas: dry runs of one block at several sizes, fitted.

Each run (:func:`~.rank_run.rank_run` at small sizes) gives a figure as a list of counts in
the order they happened: each op's FLOPs, each collective's bytes, each activation's and
each parameter's bytes. The sizes change one at a time between runs (each doubled, as the
engine's dry runs do), and one last run changes them all at once (tripled) to check. An
op's FLOPs are fitted as :mod:`typedflops.cost.engine.fit` fits them (its rule applied to
its fitted axis sizes); any other count as a monomial in the sizes
(``2*batch*d_model*seq/tp``) or an affine function of them; a figure is their sum. An FSDP
collective moves a unit's parameters in one buffer: it is split into them first. The runs
are made with one block and with two: their difference is what a block adds, so that a
stage of any number of blocks is ``once + blocks * block``.

Nothing here is a closed form: the formulas are what torch's sharding did at those sizes.
They are checked again against the runs at the planned sizes (:mod:`.ranks`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import sympy
import torch

from ..cost.engine.events import Event
from ..cost.engine.fit import Plan, fit_count, fit_event
from ..nn import TransformerConfig
from .layout import ParallelLayout
from .rank_run import RankRun, StageKind, rank_run

__all__ = ["BASE", "Fitted", "figures_of", "fit_rank", "varied"]

#: Sizes of the first run. Each run after it doubles one; the last triples all. Every
#: sharded size divides by ``tp * dp`` in every run (tp and dp reach 6 in the last).
BASE: Mapping[str, int] = {
    "vocab": 72,
    "context": 72,
    "d_model": 72,
    "n_heads": 12,
    "d_head": 8,
    "d_ff": 72,
    "batch": 2,
    "seq": 8,
    "tp": 2,
    "dp": 2,
}

#: A figure's counts in the order they happened: tag (the FSDP unit of a parameter or of a
#: collective's parameters), value, and the op's event (FLOPs).
Series = list[tuple[str, int, Event | None]]


@dataclass(frozen=True)
class Fitted:
    """A figure of a stage: what it does once (``once``), what each block adds
    (``block``), and whether every count in them was checked by the last run."""

    once: sympy.Expr
    block: sympy.Expr
    exact: bool

    def stage(self, blocks: sympy.Expr) -> sympy.Expr:
        """The figure for a stage of ``blocks`` blocks."""
        return sympy.expand(self.once + blocks * self.block)


def varied(config: TransformerConfig, layout: ParallelLayout) -> list[str]:
    """The sizes the runs change: the model's, the microbatch's and the layout's that
    change what a rank does."""
    names = ["vocab"] + (["context"] if config.positions == "learned" else [])
    names += ["d_model", "n_heads", "d_head", "d_ff", "batch", "seq"]
    if layout.tp > 1:
        names.append("tp")
    if layout.fsdp:
        names.append("dp")
    return names


def figures_of(run: RankRun) -> dict[str, Series]:
    """A run's counts by figure, each a list of ``(tag, value)`` in the order they ran.

    Figures: ``forward_flops``, ``backward_flops``, ``recompute_flops``, ``matmul_flops``
    (the forward's matrix products), ``comm:<kind>/<mesh dim>`` (bytes), and
    ``activation_bytes``, ``parameter_bytes``, ``gradient_bytes``, ``output_bytes`` (and
    ``optimizer_bytes`` when the optimizer stepped).
    """
    found: dict[str, Series] = defaultdict(list)
    for count in run.counts:
        if count.phase not in ("forward", "backward"):
            continue
        entry = (count.tag, count.value, count.event)
        if count.figure == "flops":
            found[f"{count.phase}_flops"].append(entry)
        elif count.figure == "matmul_flops":
            if count.phase == "forward":
                found["matmul_flops"].append(entry)
        elif count.figure == "recompute_flops":
            found["recompute_flops"].append(entry)
        else:
            found[f"comm:{count.figure}"].append(entry)
    for key, pairs in (
        ("activation_bytes", run.activations),
        ("parameter_bytes", run.parameters),
        ("gradient_bytes", run.gradients),
        ("optimizer_bytes", run.optimizer),
        ("output_bytes", (("other", run.output_bytes),)),
    ):
        if pairs:
            found[key] = [(tag, value, None) for tag, value in pairs]
    for key in [k for k in found if k.endswith("/dp")]:
        found[key] = _by_parameter(found[key], run)
    return dict(found)


def _by_parameter(series: Series, run: RankRun) -> Series:
    """FSDP's collectives move a group's parameters in one buffer: split each into its
    parameters' shares (each a monomial), where the buffer is exactly their sum at some
    element size (else kept whole)."""
    shards: dict[str, list[int]] = defaultdict(list)
    for tag, size in run.parameters:
        shards[tag].append(size)
    split: Series = []
    for tag, value, event in series:
        total = sum(shards[tag])
        if total and value % total == 0:
            scale = value // total
            split.extend((tag, size * scale, None) for size in shards[tag])
        else:
            split.append((tag, value, event))
    return split


def fit_rank(
    config: TransformerConfig,
    layout: ParallelLayout,
    dtype: torch.dtype,
    *,
    stage: StageKind = "whole",
    target: str = "cuda",
    capability: tuple[int, int] | None = None,
) -> dict[str, Fitted]:
    """Every figure of rank 0's microbatch as formulas in :func:`varied`'s sizes (``batch``
    is the microbatch): fitted from runs of ``stage`` with one block and with two, whose
    difference is what each block adds (``block``) and the rest what the stage does once
    (``once``). The runs take the layout's kind, not its sizes (which they vary): plans of
    one model and one kind of layout share them."""
    kind = ParallelLayout(
        dp=2 if layout.fsdp else 1,
        zero=3 if layout.fsdp else 0,
        tp=2 if layout.tp > 1 else 1,
        sp=layout.sp,
        checkpoint=layout.checkpoint,
    )
    sizes_free = config.resized(
        {**{name: BASE[name] for name in config.sizes if name in BASE}, "n_layers": 1}
    )
    return dict(_fit_kind(sizes_free, kind, dtype, stage, target, capability))


@functools.lru_cache(maxsize=32)
def _fit_kind(
    config: TransformerConfig,
    layout: ParallelLayout,
    dtype: torch.dtype,
    stage: StageKind,
    target: str,
    capability: tuple[int, int] | None,
) -> tuple[tuple[str, Fitted], ...]:
    names = varied(config, layout)
    base = dict(BASE)
    base["tp"] = BASE["tp"] if layout.tp > 1 else 1
    base["dp"] = BASE["dp"] if layout.fsdp else 1
    assignments = [dict(base)]
    assignments += [{**base, name: 2 * base[name]} for name in names]
    assignments.append({**base, **{name: 3 * base[name] for name in names}})
    plan = Plan(
        [{name: sizes[name] for name in names} for sizes in assignments],
        [[] for _ in assignments],
        names,
        True,
        {},
    )
    fits: list[dict[str, tuple[sympy.Expr, bool]]] = []
    for blocks in (1, 2):
        runs = [
            figures_of(_run(config, layout, sizes, dtype, stage, (target, capability), blocks))
            for sizes in assignments
        ]
        keys = sorted(set().union(*runs))
        fits.append(
            {
                key: _fit(plan, [run.get(key, []) for run in runs], key == "matmul_flops")
                for key in keys
            }
        )
    found: list[tuple[str, Fitted]] = []
    zero = (sympy.Integer(0), True)
    for key in sorted(set(fits[0]) | set(fits[1])):
        (one, one_ok), (two, two_ok) = fits[0].get(key, zero), fits[1].get(key, zero)
        block = sympy.expand(two - one)
        once = sympy.expand(one - block)
        found.append((key, Fitted(sympy.factor(once), sympy.factor(block), one_ok and two_ok)))
    return tuple(found)


def _run(
    config: TransformerConfig,
    layout: ParallelLayout,
    sizes: Mapping[str, int],
    dtype: torch.dtype,
    stage: StageKind,
    target: tuple[str, tuple[int, int] | None],
    blocks: int,
) -> RankRun:
    resized = config.resized(sizes)
    at = dataclasses.replace(layout, tp=sizes["tp"], dp=sizes["dp"])
    return rank_run(
        resized,
        at,
        sizes["batch"],
        sizes["seq"],
        dtype,
        stage=stage,
        blocks=blocks,
        target=target[0],
        capability=target[1],
    )


def _fit(plan: Plan, series: list[Series], matmul: bool = False) -> tuple[sympy.Expr, bool]:
    """A figure's formula: each count fitted where the runs did the same things in the same
    order (its rule applied for an op, the rule of its matrix products for ``matmul``),
    else the total fitted."""
    lengths = {len(one) for one in series}
    if len(lengths) != 1:
        return fit_count(plan, [sum(entry[1] for entry in one) for one in series])
    total: sympy.Expr = sympy.Integer(0)
    exact = True
    for position in range(lengths.pop()):
        events = [one[position][2] for one in series]
        if all(event is not None for event in events):
            found = [event for event in events if event is not None]
            formula, ok = fit_event(plan, found, matmul=matmul)
        else:
            formula, ok = fit_count(plan, [one[position][1] for one in series])
        total += formula
        exact &= ok
    return total, exact
