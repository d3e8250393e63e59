"""A module's own size whose change alters the body's ops (a branch on it) is checked far off
as the sizes fitted are: a branch past the sizes the fit reached (``hidden > 5`` fitted at
3, 4, 5) shows at 16 times the size, and the formula is marked inexact, not exact and wrong.

Hand count at n=3, d=4, hidden=6: the two products 2·3·4·6 each (288), and past the branch
a GELU and a doubling of the 3x6 hidden values (36): 324.
"""

from __future__ import annotations

import sympy
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import record, typed_flops


class Branching(torch.nn.Module):
    """``up``, an activation only past a hidden width of 5, ``down``."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.up = torch.nn.Linear(d, hidden)
        self.down = torch.nn.Linear(hidden, d)

    @typed_flops
    def forward(self, x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        h = self.up(x)
        if self.hidden > 5:
            h = torch.nn.functional.gelu(h) * 2
        out: Tensor = self.down(h)
        return out


def test_a_branch_on_an_own_size_past_the_fitted_sizes_is_not_exact() -> None:
    with record() as rec:
        Branching(4, 6)(torch.ones(3, 4))
    assert rec.total.flops == 324
    for hidden in (2, 3, 4, 5):
        cost = Branching.forward.estimate(Branching(4, hidden), n=3, d=4)
        at_six = {**{sympy.Symbol(k): v for k, v in cost.dims.items()}, sympy.Symbol("hidden"): 6}
        forward = cost.terms["forward"]
        assert not forward.exact or forward.formula.xreplace(at_six) == 324, hidden
