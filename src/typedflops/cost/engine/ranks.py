"""What every rank of a distributed run recorded, gathered: a row per rank and the whole.

Inside ``torch.distributed`` (``torchrun``), each rank's ``record()`` counts the ops that rank
ran (a DTensor's local ops, not the global ones). :func:`across_ranks` then gathers each
rank's counts and time (``all_gather``) and adds them up (``all_reduce``: FLOPs summed, the
slowest rank's time): the run's FLOP/s, and its MFU over the sum of every rank's peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ... import devices
from ...text import format_count, text_table
from ..types import Cost, palm_model_flops

__all__ = ["AcrossRanks", "RankRow", "across_ranks"]


@dataclass(frozen=True)
class _Rates:
    """Counts over a time: FLOP/s of the forward and backward, and MFU over a peak."""

    flops: int
    backward_flops: int
    model_flops: int
    seconds: float
    peak_flop_per_sec: float | None

    @property
    def flop_per_sec(self) -> float:
        """Forward and backward FLOPs per second."""
        return (self.flops + self.backward_flops) / self.seconds if self.seconds else 0.0

    @property
    def mfu(self) -> float | None:
        """Model FLOPs per second over the peak (None without a peak)."""
        if not self.peak_flop_per_sec or not self.seconds:
            return None
        return self.model_flops / self.seconds / self.peak_flop_per_sec


@dataclass(frozen=True, kw_only=True)
class RankRow(_Rates):
    """One rank's counts: forward and backward FLOPs (as recorded), model FLOPs (PaLM's:
    3x the forward's matrix products, when it ran backward), its seconds and its peak."""

    rank: int


@dataclass(frozen=True, kw_only=True)
class AcrossRanks(_Rates):
    """Every rank's row and the run's totals: FLOPs summed over the ranks, the slowest
    rank's seconds, their FLOP/s, and the MFU over the sum of the ranks' peaks."""

    rows: tuple[RankRow, ...]

    def table(self) -> str:
        """A row per rank, then the run."""
        header = ["rank", "FLOPs", "backward", "seconds", "FLOP/s", "MFU"]
        body = [
            _cells(str(r.rank), r.flops, r.backward_flops, r.seconds, r.flop_per_sec, r.mfu)
            for r in self.rows
        ]
        body.append(
            _cells(
                "all",
                self.flops,
                self.backward_flops,
                self.seconds,
                self.flop_per_sec,
                self.mfu,
            )
        )
        return text_table(header, body, right={1, 2, 3, 4, 5})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``ranks`` (one dict per rank) and the run's figures."""
        return {
            "ranks": [
                {
                    "rank": r.rank,
                    "flops": r.flops,
                    "backward_flops": r.backward_flops,
                    "model_flops": r.model_flops,
                    "seconds": r.seconds,
                    "flop_per_sec": r.flop_per_sec,
                    "mfu": r.mfu,
                }
                for r in self.rows
            ],
            "flops": self.flops,
            "backward_flops": self.backward_flops,
            "model_flops": self.model_flops,
            "seconds": self.seconds,
            "flop_per_sec": self.flop_per_sec,
            "peak_flop_per_sec": self.peak_flop_per_sec,
            "mfu": self.mfu,
        }


def _cells(
    rank: str, flops: int, backward: int, seconds: float, rate: float, mfu: float | None
) -> list[str]:
    return [
        rank,
        format_count(flops),
        format_count(backward),
        f"{seconds:.4g}",
        format_count(rate),
        "" if mfu is None else f"{mfu:.1%}",
    ]


def _device_of(group: Any) -> torch.device:
    """Where the group's collectives take tensors: the current GPU for NCCL, else the CPU."""
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def across_ranks(
    total: Cost,
    seconds: float,
    *,
    backward: bool = True,
    dtype: torch.dtype | None = None,
    peak: float | None = None,
    group: Any = None,
) -> AcrossRanks:
    """Gather every rank's ``total`` (the cost its ``record()`` saw) and ``seconds``; each
    rank calls it (it is a collective). ``backward`` says whether the recorded block ran
    backward too (its FLOPs, predicted per op, then count, and model FLOPs are PaLM's 3x the
    forward's matrix products; else the forward's). ``peak`` is this rank's peak FLOP/s
    (default: its device's dense peak at ``dtype``, float32 when not given)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError("across_ranks(): no process group: run under torchrun")
    figure = peak if peak is not None else devices.peak_flops(dtype or torch.float32)
    backward_flops = total.backward_flops if backward else 0
    model_flops = palm_model_flops(total.matmul_flops) if backward else total.matmul_flops
    where = _device_of(group)
    # counts as int64 (exact beyond 2**53), time and peak as float64
    counts = torch.tensor(
        [total.flops, backward_flops, model_flops], dtype=torch.int64, device=where
    )
    timing = torch.tensor([seconds, figure or 0.0], dtype=torch.float64, device=where)
    ranks = dist.get_world_size(group)
    every_count = torch.empty(ranks * 3, dtype=torch.int64, device=where)
    every_time = torch.empty(ranks * 2, dtype=torch.float64, device=where)
    dist.all_gather_into_tensor(every_count, counts, group=group)
    dist.all_gather_into_tensor(every_time, timing, group=group)
    summed = counts.clone()
    dist.all_reduce(summed, group=group)
    slowest = timing[:1].clone()
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    peaks = timing[1:].clone()
    dist.all_reduce(peaks, group=group)
    rows = tuple(
        RankRow(
            rank=index,
            flops=int(count[0]),
            backward_flops=int(count[1]),
            model_flops=int(count[2]),
            seconds=float(time[0]),
            peak_flop_per_sec=float(time[1]) or None,
        )
        for index, (count, time) in enumerate(
            zip(
                every_count.view(ranks, 3).tolist(), every_time.view(ranks, 2).tolist(), strict=True
            )
        )
    )
    known = all(row.peak_flop_per_sec for row in rows)
    return AcrossRanks(
        rows=rows,
        flops=int(summed[0]),
        backward_flops=int(summed[1]),
        model_flops=int(summed[2]),
        seconds=float(slowest[0]),
        peak_flop_per_sec=float(peaks[0]) if known else None,
    )
