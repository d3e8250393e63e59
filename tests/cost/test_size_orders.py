"""Bodies that branch on how two sizes compare (a residual only where widths are equal, a
repeat of key heads only where there are fewer of them, a square-input special case): a
formula fitted where the sizes compare one way is wrong where they compare the other, so it
is exact only where it gives the count of a dry run there too."""

from __future__ import annotations

import operator
from collections.abc import Callable

import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn

import typedflops
from typedflops import Cost, typed_flops

SLOW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COMPARISONS: dict[str, Callable[[int, int], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
}


class Projection(nn.Module):
    """``y = W x + b``, plus ``x`` when the widths compare as ``compare`` says."""

    def __init__(self, d_in: int, d_out: int, compare: str = "==") -> None:
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)
        self.d_in, self.d_out, self.compare = d_in, d_out, compare

    @typed_flops
    def forward(self, x: Float[Tensor, "b d_in"]) -> Float[Tensor, "b d_out"]:
        y: Tensor = self.proj(x)
        if COMPARISONS[self.compare](self.d_in, self.d_out):
            y = y + x[:, : self.d_out].sum(-1, keepdim=True)
        return y


def _count(d_in: int, d_out: int, compare: str, b: int) -> int:
    cost: Cost = Projection.forward.estimate(Projection(d_in, d_out, compare), b=b)
    return cost.flops


def _exact_where_marked(cost: Cost, compare: str, b: int, d_in: int, d_out: int) -> None:
    if cost.exact:
        values = {**cost.dims, "b": b, "d_in": d_in, "d_out": d_out}
        formula = cost.formula.xreplace({sympy.Symbol(k): v for k, v in values.items()})
        assert formula == _count(d_in, d_out, compare, b), (cost.formula, d_in, d_out)


def test_a_residual_only_at_equal_widths_is_inexact_where_they_differ() -> None:
    cost = Projection.forward.estimate(Projection(8, 16), b=4)
    assert cost.flops == 2 * 4 * 8 * 16  # the product (a bias add is addmm's, uncounted)
    assert not cost.exact  # at d_in == d_out the body adds a residual
    assert _count(8, 8, "==", 4) == 2 * 4 * 8 * 8 + 4 * 8 + 4 * 8  # and a sum, an add


def test_a_branch_on_which_width_is_larger_is_inexact() -> None:
    assert not Projection.forward.estimate(Projection(8, 16, ">"), b=4).exact
    assert not Projection.forward.estimate(Projection(16, 8, ">"), b=4).exact


def test_a_body_without_a_branch_stays_exact_at_coincident_sizes() -> None:
    @typed_flops
    def linear(
        x: Float[Tensor, "b d_in"], w: Float[Tensor, "d_in d_out"]
    ) -> Float[Tensor, "b d_out"]:
        return torch.relu(x @ w)

    cost = linear.estimate(b=4, d_in=8, d_out=16)
    assert cost.exact
    assert cost.formula == sympy.sympify("b*d_out*(2*d_in + 1)")


def test_a_square_input_special_case_in_the_calls_dims_is_inexact() -> None:
    @typed_flops
    def gram(x: Float[Tensor, "n m"]) -> Float[Tensor, "m m"]:
        product = x.T @ x
        if x.shape[0] == x.shape[1]:
            product = product * 2  # (another op where the input is square)
        return product

    assert not gram.estimate(n=6, m=4).exact
    assert gram.estimate(n=6, m=4).flops == 2 * 6 * 4 * 4
    assert gram.estimate(n=4, m=4).flops == 2 * 4 * 4 * 4 + 4 * 4


def test_grouped_query_heads_repeated_only_when_fewer_are_inexact() -> None:
    class KeyHeads(nn.Module):
        def __init__(self, n_heads: int, n_kv_heads: int) -> None:
            super().__init__()
            self.n_heads, self.n_kv_heads = n_heads, n_kv_heads

        def forward(self, q: Tensor, k: Tensor) -> Tensor:
            if self.n_kv_heads < self.n_heads:
                k = k.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1) * 1.0
            return q @ k.transpose(-1, -2)

    spec_q = Float[Tensor, "b n_heads s d"]
    spec_k = Float[Tensor, "b n_kv_heads s d"]
    cost = typedflops.estimate(
        KeyHeads(4, 4), spec_q, spec_k, b=2, s=5, d=8, n_heads=4, n_kv_heads=4
    )
    assert cost.flops == 2 * 2 * 4 * 5 * 5 * 8
    assert not cost.exact  # with fewer key heads, a repeat and a multiply run too
    fewer = typedflops.estimate(
        KeyHeads(4, 2), spec_q, spec_k, b=2, s=5, d=8, n_heads=4, n_kv_heads=2
    )
    assert fewer.flops == cost.flops + 2 * 4 * 5 * 8  # the multiply of the repeated keys
    assert not fewer.exact


@SLOW
@given(
    compare=st.sampled_from(sorted(COMPARISONS)),
    widths=st.tuples(st.integers(2, 12), st.integers(2, 12)),
    other=st.tuples(st.integers(2, 12), st.integers(2, 12)),
    b=st.integers(1, 5),
)
def test_a_formula_marked_exact_holds_wherever_the_widths_fall(
    compare: str, widths: tuple[int, int], other: tuple[int, int], b: int
) -> None:
    cost = Projection.forward.estimate(Projection(*widths, compare), b=3)
    assert cost.flops == _count(*widths, compare, 3)
    _exact_where_marked(cost, compare, b, *other)
    # equal and turned widths: where a comparison changes its outcome
    _exact_where_marked(cost, compare, b, widths[0], widths[0])
    _exact_where_marked(cost, compare, b, widths[1], widths[0])
