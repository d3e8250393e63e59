"""A record opened by code that a dry run runs again on meta (a decorated function's fit
and estimate run its body, and the plain functions it calls, at other sizes) sees none of
the dry run's ops: its total says so, 0 FLOPs marked not exact with the reason among its
uncounted, never a count of 0 taken for what ran. The call that ran records its ops as
they ran, and the dry runs' formula stays exact.

Hand counts: ``x @ w`` with ``x`` n x 16 and ``w`` 16 x 16 is 512·n FLOPs, P = 4,096 at
n = 8; ``logged`` runs two products and its caller one more: 1536·n.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
from filled import ones
from jaxtyping import Float
from torch import Tensor

from typedflops import Cost, record, typed_flops

W = ones(16, 16)
P = 2 * 8 * 16 * 16
_seen: list[tuple[str, Cost]] = []


def logged(x: Tensor) -> Tensor:
    """Two products, the first in a record of its own, the whole in another."""
    with record() as whole:
        with record() as first:
            y = x @ W
        y = y @ W
    _seen.append((x.device.type, first.total))
    _seen.append((x.device.type, whole.total))
    return y


@typed_flops
def caller(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    return logged(x) @ W


def _totals(run: Callable[[], Any]) -> list[tuple[str, Cost]]:
    _seen.clear()
    run()
    return list(_seen)


def test_records_in_a_dry_run_say_they_saw_none_of_it() -> None:
    costs: list[Cost] = []

    def run() -> None:
        with record() as outer:
            caller(ones(8, 16))
        costs.extend((outer.total, outer.calls[0].cost()))  # (the row's fit runs here)

    seen = _totals(run)
    total, row = costs
    assert total.flops == 3 * P
    assert (row.formula, row.exact) == (1536 * sympy.Symbol("n"), True)
    (_, first), (_, whole), *dry = seen
    assert (first.flops, whole.flops, first.exact, whole.exact) == (P, 2 * P, True, True)
    assert dry, "the fit runs the body again"
    for device, total in dry:
        assert device == "meta"
        assert (total.flops, total.exact) == (0, False)
        assert any("dry run" in name for name in total.uncounted)


def test_an_estimate_keeps_its_count_and_the_records_in_it_say_they_saw_none() -> None:
    seen = _totals(lambda: caller.estimate(n=4, d=16))
    cost = caller.estimate(n=4, d=16)
    assert (cost.flops, cost.exact) == (1536 * 4, True)
    assert seen
    assert all(not total.exact and total.flops == 0 for _, total in seen)
