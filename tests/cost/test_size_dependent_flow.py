"""Bodies whose ops change with a size: loops over a size are fitted one degree up, and a
formula no fit makes exact (a branch on a threshold, ``n // 2`` steps) is marked inexact.
Whatever the body, a formula marked exact gives the count of a dry run at other sizes."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor

from typedflops import Cost, TypedFunction, record, typed_flops

n, d = sympy.symbols("n d")
SLOW = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_true_at_own_sizes(cost: Cost) -> None:
    for name, term in cost.terms.items():
        assert term.holds_at(cost.dims), (name, term, cost.dims)


def assert_exact_where_marked(
    function: TypedFunction[..., Any], cost: Cost, other: Mapping[str, int], **options: Any
) -> Cost:
    """Every term of ``cost`` marked exact gives, at ``other`` sizes, the count of a dry
    run there; returns that run's Cost."""
    sizes: dict[str, Any] = {**other, **options}
    again: Cost = function.estimate(**sizes)
    assert_true_at_own_sizes(again)
    values = {**cost.dims, **other}
    for name, term in cost.terms.items():
        if term.exact:
            assert term.at(values) == again.terms[name].count, (name, term.formula, other)
    return again


@typed_flops
def doubled_n_times(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    for _ in range(x.shape[0]):
        x = x * 2
    return x


def test_a_loop_over_a_size_is_a_polynomial_one_degree_up() -> None:
    cost = doubled_n_times.estimate(n=8, d=4)
    assert cost.exact
    assert cost.flops == 8 * 8 * 4
    assert cost.formula == d * n**2
    assert_true_at_own_sizes(cost)
    with_grad = doubled_n_times.estimate(n=5, d=3, grad=("x",))
    assert with_grad.exact and with_grad.backward_formula == d * n**2


@SLOW
@given(base=st.tuples(st.integers(1, 12), st.integers(1, 6)), other=st.integers(1, 30))
def test_a_loop_formula_predicts_dry_runs_at_other_sizes(base: tuple[int, int], other: int) -> None:
    cost = doubled_n_times.estimate(n=base[0], d=base[1], grad=("x",))
    assert cost.exact
    assert_true_at_own_sizes(cost)
    assert_exact_where_marked(doubled_n_times, cost, {"n": other, "d": 5}, grad=("x",))


@typed_flops
def rows_summed(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, " k"]:
    total = torch.zeros(w.shape[1])
    for row in x.unbind(0):
        total = total + row @ w
    return total


@typed_flops
def pairs(x: Float[Tensor, "n m"]) -> Float[Tensor, "n m"]:
    for i in range(x.shape[0]):
        for _ in range(x.shape[1]):
            x = x + x[i]
    return x


@typed_flops
def every_other(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    for _ in range(x.shape[0] // 2):
        x = x * 2
    return x


@typed_flops
def halved(x: Float[Tensor, " n"]) -> Float[Tensor, ""]:
    while x.shape[0] > 1:
        x = x[: x.shape[0] // 2] * 2
    return x.sum()


@typed_flops
def on_parity(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    if x.shape[0] % 2 == 0:
        return x * x * x
    return x * x


def test_loops_over_rows_and_nested_loops_are_fitted() -> None:
    cost = rows_summed.estimate(n=5, d=3, k=4)
    k, m = sympy.symbols("k m")
    assert cost.exact and sympy.expand(cost.formula - (2 * d * k * n + k * n)) == 0
    nested = pairs.estimate(n=3, m=4)
    assert nested.exact and sympy.expand(nested.formula - m**2 * n**2) == 0


@SLOW
@given(
    base=st.tuples(st.integers(2, 9), st.integers(2, 9), st.integers(1, 5)),
    other=st.tuples(st.integers(1, 14), st.integers(1, 14), st.integers(1, 5)),
)
def test_several_loops_predict_other_sizes(
    base: tuple[int, int, int], other: tuple[int, int, int]
) -> None:
    cost = rows_summed.estimate(n=base[0], d=base[1], k=base[2])
    assert cost.exact
    assert_exact_where_marked(rows_summed, cost, dict(zip("ndk", other, strict=True)))
    nested = pairs.estimate(n=base[0], m=base[1])
    assert nested.exact
    assert_exact_where_marked(pairs, nested, {"n": other[0], "m": other[1]})


@SLOW
@given(base=st.integers(1, 40), other=st.integers(1, 60))
def test_steps_that_are_no_polynomial_are_never_exact_and_wrong(base: int, other: int) -> None:
    for function, sizes, others in (
        (every_other, {"n": base, "d": 3}, {"n": other, "d": 3}),
        (halved, {"n": base}, {"n": other}),
        (on_parity, {"n": base, "d": 2}, {"n": other, "d": 2}),
    ):
        given: dict[str, Any] = dict(sizes)
        cost = function.estimate(**given)
        assert_true_at_own_sizes(cost)
        assert_exact_where_marked(function, cost, others)


def test_a_parity_branch_is_inexact() -> None:
    cost = on_parity.estimate(n=8, d=2)
    assert not cost.exact
    assert cost.formula == 2 * d * n  # true here, and marked
    assert "~ 2*d*n" in str(cost)


def _branch(threshold: int) -> TypedFunction[[Tensor], Tensor]:
    @typed_flops
    def branch(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        if x.shape[0] > threshold:
            x = x * 2
        return x * 3

    return branch


def test_a_branch_on_a_size_is_inexact_on_both_sides() -> None:
    branch = _branch(100)
    small, large = branch.estimate(n=8, d=4), branch.estimate(n=200, d=4)
    assert (small.formula, small.flops, small.exact) == (d * n, 32, False)
    assert (large.formula, large.flops, large.exact) == (2 * d * n, 1600, False)
    assert "~ d*n" in str(small) and "~ 2*d*n" in str(large)


@SLOW
@given(
    threshold=st.integers(2, 1000),
    base=st.integers(2, 300),
    other=st.integers(2, 1000),
)
def test_a_branch_is_never_exact_and_wrong(threshold: int, base: int, other: int) -> None:
    # Far checks reach every threshold from 2 to max(64 * n + 1, 1025).
    branch = _branch(threshold)
    cost = branch.estimate(n=base, d=3)
    assert_true_at_own_sizes(cost)
    assert_exact_where_marked(branch, cost, {"n": other, "d": 3})
    assert_exact_where_marked(branch, cost, {"n": threshold, "d": 3})
    assert_exact_where_marked(branch, cost, {"n": threshold + 1, "d": 3})


def test_the_formula_attribute_warns_when_it_holds_at_its_sizes_only() -> None:
    branch = _branch(100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        formula = branch.formula
    assert formula == d * n  # at probe sizes n=24, d=48
    assert [str(w.message) for w in caught] == [
        "branch.formula holds at n=24, d=48 only: dry runs at other sizes gave counts no "
        "formula fitted (Cost.exact is False)"
    ]
    assert doubled_n_times.formula == d * n**2


def _widened(threshold: int) -> Any:
    class Widened(torch.nn.Module):
        """A branch on a module's own size: an extra activation past a hidden width."""

        def __init__(self, d: int, hidden: int) -> None:
            super().__init__()
            self.hidden = hidden
            self.up = torch.nn.Linear(d, hidden)
            self.down = torch.nn.Linear(hidden, d)

        @typed_flops
        def forward(self, x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
            h = self.up(x)
            if self.hidden > threshold:
                h = torch.nn.functional.gelu(h) * 2
            out: Tensor = self.down(h)
            return out

    return Widened


@SLOW
@given(
    threshold=st.integers(2, 200),
    hidden=st.integers(2, 24),
    other=st.integers(2, 400),
)
def test_a_branch_on_a_modules_own_size_is_never_exact_and_wrong(
    threshold: int, hidden: int, other: int
) -> None:
    # The module is built again at 16 times its own sizes and a 16th of them: every
    # threshold between is reached.
    widened = _widened(threshold)

    def cost_at(width: int) -> Cost:
        cost: Cost = widened.forward.estimate(widened(4, width), n=3, d=4)
        return cost

    cost = cost_at(hidden)
    assert_true_at_own_sizes(cost)
    for width in (other, threshold, threshold + 1):
        if max(2, hidden // 16) <= width <= 16 * hidden:
            again = cost_at(width)
            for name, term in cost.terms.items():
                if term.exact:
                    values = {**cost.dims, "hidden": width}
                    assert term.at(values) == again.terms[name].count, name


def test_a_branch_on_a_modules_own_size_past_the_fits_is_inexact() -> None:
    widened = _widened(64)
    cost = widened.forward.estimate(widened(4, 16), n=3, d=4)
    assert not cost.exact
    assert "hidden" in {str(s) for s in cost.formula.free_symbols}
    assert cost.forward.holds_at(cost.dims)


def test_a_branch_on_an_own_size_past_the_fitted_sizes_is_not_exact() -> None:
    # Fitted at hidden 2..5 (3, 4, 5 and twice them), the branch past 5 shows only far off.
    # Hand count at n=3, d=4, hidden=6: the two products 2*3*4*6 each (288), and past the
    # branch a GELU and a doubling of the 3x6 hidden values (36): 324.
    widened = _widened(5)
    with record() as rec:
        widened(4, 6)(torch.ones(3, 4))
    assert rec.total.flops == 324
    for hidden in (2, 3, 4, 5):
        cost = widened.forward.estimate(widened(4, hidden), n=3, d=4)
        forward = cost.terms["forward"]
        assert not forward.exact or forward.at({**cost.dims, "hidden": 6}) == 324, hidden


@typed_flops
def _first_axis_loop(x: Float[Tensor, "*batch d"]) -> Float[Tensor, "*batch d"]:
    for _ in range(x.shape[0]):
        x = x * 2
    return x


@typed_flops
def _first_axis_mean(x: Float[Tensor, "... d"]) -> Tensor:
    return x.mean(0)


@typed_flops
def _batched_products(x: Float[Tensor, "*batch n d"]) -> Float[Tensor, "*batch n n"]:
    return x @ x.transpose(-1, -2)


@pytest.mark.parametrize("axes", [(), (4,), (2, 3), (3, 2), (2, 2, 2)], ids=str)
@pytest.mark.parametrize(
    ("function", "name", "product_only"),
    [
        (_first_axis_loop, "batch", False),
        (_first_axis_mean, "ellipsis", False),
        (_batched_products, "batch", True),
    ],
    ids=["loop", "mean", "products"],
)
def test_a_variadic_dims_formula_is_exact_only_where_the_product_gives_the_count(
    function: TypedFunction[..., Any], name: str, product_only: bool, axes: tuple[int, ...]
) -> None:
    # `*batch` is one symbol, the product of its axes: a body that works on x.shape[0]
    # alone has no formula in it, whatever the axes it was fitted at.
    sizes: dict[str, Any] = {"n": 3} if function is _batched_products else {}
    cost = function.estimate(**{**sizes, name: axes, "d": 4})
    assert_true_at_own_sizes(cost)
    held = name in cost.fixed  # no axis to change at (): a number in the formula
    assert cost.exact == (product_only or held)
    for split in [(2, 5), (5, 2), (6,), (3, 2, 2), (1, 6)]:
        again = function.estimate(**{**sizes, name: split, "d": 4})
        for term_name, term in cost.terms.items():
            if term.exact and not held:
                values = {**cost.dims, name: math.prod(split)}
                assert term.at(values) == again.terms[term_name].count, (term_name, split)


@typed_flops
def refined(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    for _ in range(min(x.shape[0], 64)):  # at most 64 refinement steps
        x = x * 0.5
    return x


def test_a_loop_capped_past_the_fits_sizes_is_not_exact() -> None:
    """Fitted at 8 (and up to 40), ``d*n**2`` holds there; the loop's far check at 129
    finds the cap: at 100 the formula would give 40,000 where 25,600 run."""
    cost = refined.estimate(n=8, d=4)
    assert (cost.flops, cost.exact) == (8 * 8 * 4, False)
    assert refined.estimate(n=100, d=4).flops == 64 * 100 * 4


def test_a_loop_too_long_to_check_far_is_not_exact() -> None:
    """At 520 steps the far check would run 8,321: past the most a check runs, the
    formula is not shown far off, and not marked exact (it holds at its own sizes)."""
    cost = doubled_n_times.estimate(n=520, d=2)
    assert (cost.flops, cost.exact) == (520 * 520 * 2, False)


@typed_flops
def powers(x: Float[Tensor, "n n"], v: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    for _ in range(x.shape[0]):
        v = x @ v
    return v


def test_ops_of_a_loop_over_a_size_they_depend_on_are_not_exact() -> None:
    # each product costs 2*n**2*d; its formula, fitted from runs of the same ops (n held),
    # reads 32*d at n=4: true there, and before marked exact though at n=6 each costs 72*d
    cost = powers.estimate(n=4, d=3)
    assert sympy.expand(cost.formula - 2 * d * n**3) == 0 and cost.exact
    assert [op.flops for op in cost.ops] == [96] * 4
    assert all(not op.forward.exact for op in cost.ops)
    assert all(op.forward.holds_at(cost.dims) for op in cost.ops)
    assert all(op.flops == 72 * 3 for op in powers.estimate(n=6, d=3).ops)


@typed_flops
def exp_where_n_divides_by_3(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    if x.shape[0] % 3 == 0:
        x = x.exp()
    return x + 1


def test_a_check_run_with_other_ops_that_refutes_the_formula_leaves_it_inexact() -> None:
    # at n=8 the body runs one add (8*4); the fit's check run moves n to 24, where the exp
    # runs too: that run's 2*24*d refutes d*n, so the total is not exact, whatever other run
    # then checks it
    cost = exp_where_n_divides_by_3.estimate(n=8, d=4)
    assert cost.flops == 8 * 4
    assert cost.formula == d * n
    assert not cost.exact
    with record() as rec:
        exp_where_n_divides_by_3(torch.randn(24, 4))
    assert rec.total.flops == 2 * 24 * 4 != cost.formula.subs({n: 24, d: 4})
    (add,) = cost.ops  # (the add's own row holds at every n: d*n)
    assert add.forward.exact and add.forward.formula == d * n


@typed_flops
def pdist_exp_where_n_divides_by_10(x: Float[Tensor, "n d"]) -> Tensor:
    if x.shape[0] % 10 == 0:
        x = x.exp()
    return torch.nn.functional.pdist(x)


def test_a_further_fit_run_with_other_ops_that_refutes_the_formula_leaves_it_inexact() -> None:
    # pdist's n*(n - 1)/2 pairs take the further fit's runs; at n=8 its last run moves n to
    # 5*8 = 40, where the exp runs too (no other run's n divides by 10): that run refutes
    # the formula, so the total is not exact
    cost = pdist_exp_where_n_divides_by_10.estimate(n=8, d=4)
    # 8*7/2 pairs at 4*d + 1 FLOPs each (pdist's rule, as a record counts it below)
    assert cost.formula == n * (n - 1) * (4 * d + 1) / 2
    assert cost.flops == 8 * 7 * (4 * 4 + 1) // 2
    assert not cost.exact
    with record() as rec:
        pdist_exp_where_n_divides_by_10(torch.randn(40, 4))
    assert rec.total.flops == 40 * 4 + 40 * 39 * (4 * 4 + 1) // 2
    assert rec.total.flops != cost.formula.subs({n: 40, d: 4})
