"""Closed forms of data parallelism: ZeRO's model states and the collectives of a step.

ZeRO (Rajbhandari et al. 2020) counts mixed-precision Adam's model states per parameter:
2 bytes of 16-bit weights, 2 of 16-bit gradients, and K = 12 of optimizer state (fp32 master
weights, momentum and variance). Over N data-parallel ranks, stage 1 shards the K bytes,
stage 2 also the gradients, stage 3 also the weights:

- baseline ``(2 + 2 + K) * P = 16P``; stage 1 ``4P + 12P/N``; stage 2 ``2P + 14P/N``;
  stage 3 ``16P/N``.

torch shards the parameters itself (``fully_shard``: stage 3, run by the planner); it has no
stage 1 or 2 of its own for a model whose weights and gradients stay whole, so the planner
counts those shards here, from the weights and gradients torch's run holds.

Communication (Rajbhandari et al. 2020, section 7; Narayanan et al. 2021): a data-parallel
step all-reduces the 16-bit gradients (a buffer of ``2P`` bytes, ``2(n-1)/n`` of it on the
wire per rank); stages 1 and 2 reduce-scatter them and all-gather the updated weights, the
same volume; stage 3 also gathers the weights again for backward, 1.5 times it.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

__all__ = ["ZeroStates", "zero_states"]


@dataclass(frozen=True)
class ZeroStates:
    """Bytes per rank of the weights, gradients and optimizer state (K bytes per parameter,
    master weights included), as ZeRO counts them, and their sum."""

    parameters: sympy.Expr
    gradients: sympy.Expr
    optimizer: sympy.Expr

    @property
    def total(self) -> sympy.Expr:
        """All three together."""
        return sympy.expand(self.parameters + self.gradients + self.optimizer)


def zero_states(
    stage: int,
    parameters: sympy.Expr | int,
    ranks: sympy.Expr | int,
    *,
    weight_bytes: int = 2,
    optimizer_bytes: int = 12,
) -> ZeroStates:
    """ZeRO's model states per rank at ``stage`` for ``parameters`` over ``ranks``
    data-parallel ranks: 16-bit weights and gradients (``weight_bytes`` each) and
    ``optimizer_bytes`` per parameter of optimizer state (Adam in mixed precision: 12).

    >>> P, N = sympy.symbols("P N")
    >>> [zero_states(stage, P, N).total for stage in range(4)]
    [16*P, 4*P + 12*P/N, 2*P + 14*P/N, 16*P/N]
    >>> [round(float(zero_states(s, 7.5e9, 64).total) / 1e9, 1) for s in range(4)]
    [120.0, 31.4, 16.6, 1.9]
    """
    p = sympy.sympify(parameters)
    n = sympy.sympify(ranks)
    return ZeroStates(
        parameters=weight_bytes * p / (n if stage >= 3 else 1),
        gradients=weight_bytes * p / (n if stage >= 2 else 1),
        optimizer=optimizer_bytes * p / (n if stage >= 1 else 1),
    )
