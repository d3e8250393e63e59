"""An Optional tensor parameter that defaults to None, named ``=None`` in ``estimate()``,
stays None, as a call that passes None runs: the estimate is that call's count, even where a
dim only it uses is given.

Hand count: ``x * 2`` on an n x d ``x`` is n·d FLOPs; with a bias of e values, its sum
(e: one per value summed) and the add of the sum to each value (n·d) more.
"""

from __future__ import annotations

import sympy
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import record, typed_flops


@typed_flops
def shifted(
    x: Float[Tensor, "n d"], bias: Float[Tensor, " e"] | None = None
) -> Float[Tensor, "n d"]:
    """``x * 2``, plus the sum of ``bias`` where one is given."""
    y = x * 2
    if bias is not None:
        y = y + bias.sum()
    return y


def test_none_for_an_optional_tensor_keeps_it_none() -> None:
    with record() as rec:
        shifted(torch.ones(4, 8), None)
    n, d = sympy.symbols("n d")
    for cost in (shifted.estimate(n=4, d=8, bias=None), shifted.estimate(n=4, d=8, e=3, bias=None)):
        assert cost.flops == rec.total.flops == 4 * 8
        assert cost.formula == n * d


def test_true_for_an_optional_tensor_still_builds_it() -> None:
    with record() as rec:
        shifted(torch.ones(4, 8), torch.ones(3))
    cost = shifted.estimate(n=4, d=8, e=3, bias=True)
    assert cost.flops == rec.total.flops == 2 * 4 * 8 + 3
