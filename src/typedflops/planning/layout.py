"""A parallel layout: how a training step is spread over ranks.

Ranks are numbered with the tensor-parallel group fastest, then data parallel, then the
pipeline stage (Megatron-LM's order): the ``tp`` ranks of a group sit in one node where
``tp`` is at most the node's GPUs, and rank 0 holds the first pipeline stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy

from ..errors import SpecError

__all__ = ["ParallelLayout"]


@dataclass(frozen=True)
class ParallelLayout:
    """Data, tensor, sequence and pipeline parallelism of one training step.

    - ``dp``: data-parallel ranks, each with ``batch / dp`` of the batch; ``zero`` says what
      they shard (ZeRO, Rajbhandari et al. 2020): 0 nothing (each rank keeps every state,
      gradients are all-reduced), 1 the optimizer state and master weights, 2 also the
      gradients, 3 also the parameters (torch's ``fully_shard``, FSDP2).
    - ``tp``: tensor-parallel ranks (Megatron-LM's column and row splits of each block's
      matrices, the embedding and the head by vocabulary, torch's
      ``torch.distributed.tensor.parallel``); ``sp`` adds sequence parallelism (norms,
      dropout and residuals split along the sequence between them).
    - ``pp``: pipeline stages of ``n_layers / pp`` blocks each, run with 1F1B over
      ``microbatches`` microbatches (with ``pp == 1``, gradient accumulation over them).
    - ``checkpoint``: each block recomputes its forward during backward.

    >>> layout = ParallelLayout(dp=8, tp=8, pp=16, microbatches=64)
    >>> layout.world, layout.in_flight
    (1024, 16)
    """

    dp: int = 1
    zero: int = 0
    tp: int = 1
    sp: bool = False
    pp: int = 1
    microbatches: int = 1
    checkpoint: bool = False

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "microbatches"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise SpecError.at("ParallelLayout()", f"{name}={value!r} is not a count >= 1")
        if self.zero not in (0, 1, 2, 3):
            raise SpecError.at(
                "ParallelLayout()", f"zero={self.zero!r} is not a ZeRO stage", hint="0, 1, 2 or 3"
            )
        if self.sp and self.tp == 1:
            raise SpecError.at(
                "ParallelLayout()",
                "sp=True splits the sequence over the tensor-parallel ranks: it needs tp > 1",
            )

    @property
    def world(self) -> int:
        """The number of ranks: ``dp * tp * pp``."""
        return self.dp * self.tp * self.pp

    @property
    def in_flight(self) -> int:
        """Microbatches whose activations rank 0 (the first stage) holds at once under
        1F1B: ``min(pp, microbatches)`` (Narayanan et al. 2021); 1 without a pipeline."""
        return min(self.pp, self.microbatches) if self.pp > 1 else 1

    @property
    def fsdp(self) -> bool:
        """Whether torch's ``fully_shard`` shards the parameters (ZeRO stage 3, dp > 1)."""
        return self.zero == 3 and self.dp > 1

    def sizes(self) -> dict[str, int]:
        """The layout's sizes as formulas name them."""
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "microbatches": self.microbatches}

    def in_flight_formula(self) -> sympy.Expr:
        """:attr:`in_flight` as a formula in ``pp`` and ``microbatches``."""
        if self.pp == 1:
            return sympy.Integer(1)
        return sympy.Min(sympy.Symbol("pp"), sympy.Symbol("microbatches"))

    def describe(self) -> str:
        """One line: ``dp 8 (ZeRO-1) x tp 8 (+sp) x pp 16 (1F1B, 64 microbatches)``."""
        parts = [f"dp {self.dp}" + (f" (ZeRO-{self.zero})" if self.zero else "")]
        parts.append(f"tp {self.tp}" + (" (+sp)" if self.sp else ""))
        pipeline = f"pp {self.pp}"
        if self.pp > 1:
            pipeline += f" (1F1B, {self.microbatches} microbatches)"
        elif self.microbatches > 1:
            pipeline += f" ({self.microbatches} microbatches accumulated)"
        parts.append(pipeline)
        text = " x ".join(parts)
        return text + (", activation checkpointing" if self.checkpoint else "")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the layout."""
        return {
            "dp": self.dp,
            "zero": self.zero,
            "tp": self.tp,
            "sp": self.sp,
            "pp": self.pp,
            "microbatches": self.microbatches,
            "checkpoint": self.checkpoint,
            "world": self.world,
            "in_flight": self.in_flight,
        }
