"""A record's row takes a fitted formula only where the fit is of the work the row did: the
same ops, not only the same totals. A body that reads a global may run other ops at a later
dry run, or on another call, whose totals coincide at the row's sizes (two products of
n·d·2 against one of n·d·d at d = 4): such a row keeps its counts as numbers, marked not
exact, instead of a formula that is wrong at every other size.
"""

from __future__ import annotations

import pytest
import sympy
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import record, typed_flops

SETTINGS = {"full": True}


@typed_flops
def project(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "n d"]:
    if SETTINGS["full"]:
        return x @ w
    half = w[:, :2]  # two products of two columns each: 64 FLOPs at n = 2, d = 4, as x @ w
    return torch.cat([x @ half, x @ half], dim=1)  # (d = 4 only: the return is "n d")


n, d = sympy.symbols("n d")
FULL, HALVES = 2 * d**2 * n, 32 * n


def _rows(full_when_asked: bool) -> list[tuple[int, sympy.Expr, bool]]:
    x, w = torch.randn(2, 4), torch.randn(4, 4)
    try:
        with record() as rec:
            SETTINGS["full"] = True
            project(x, w)
            SETTINGS["full"] = False
            project(x, w)
        SETTINGS["full"] = full_when_asked
        return [(c.flops, c.formula, c.exact) for c in (row.cost() for row in rec.calls)]
    finally:
        SETTINGS["full"] = True


@pytest.mark.parametrize("full_when_asked", [True, False])
def test_a_row_takes_no_fit_of_other_ops_whose_totals_coincide(full_when_asked: bool) -> None:
    rows = _rows(full_when_asked)
    assert [flops for flops, _, _ in rows] == [64, 64]  # what ran, both times
    for (_, formula, exact), truth in zip(rows, (FULL, HALVES), strict=True):
        # each formula is the row's own work (d held at 4 for the halves), or its count
        assert (formula == truth and exact) or (formula == 64 and not exact)
    # the row whose body runs alike when the table is asked for is fitted
    fitted = 0 if full_when_asked else 1
    assert rows[fitted][1:] == ((FULL, True) if full_when_asked else (HALVES, True))
