"""Formulas at size 1: where torch (a sum over one element is a multiply) or the body (a
branch on a dim being 1) runs other ops there, the formula has a part that says so, and an
exact formula gives the count of a dry run at 1 as at any other size."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor

from typedflops import Cost, TypedFunction, einsum, record, typed_flops
from typedflops.cost.types import above_one, is_one
from typedflops.testing import assert_flops

b, i, j, o, n, d = sympy.symbols("b i j o n d")


@typed_flops
def contract(x: Float[Tensor, "b i"], w: Float[Tensor, "i o"]) -> Float[Tensor, "b o"]:
    return einsum(x, w, "b i, i o -> b o")


@typed_flops
def early(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    if x.shape[1] == 1:
        return x
    return x.softmax(-1)


@typed_flops
def two_sums(x: Float[Tensor, "b i j"], w: Float[Tensor, "i j o"]) -> Float[Tensor, "b o"]:
    return torch.einsum("bij,ijo->bo", x, w)


@typed_flops
def mixed(x: Float[Tensor, "n d"], w: Float[Tensor, "d o"]) -> Float[Tensor, "n o"]:
    h = torch.relu(x @ w)  # a product over d stays a product at d = 1
    return torch.einsum("no,no->no", h, h) + h


def _estimate(function: TypedFunction[..., Tensor], sizes: dict[str, int]) -> Cost:
    estimate: Callable[..., Cost] = function.estimate  # (sizes are keywords, like dtype=)
    return estimate(**sizes)


def _at(cost: Cost, sizes: dict[str, int]) -> object:
    return cost.formula.xreplace({sympy.Symbol(k): v for k, v in sizes.items()})


def test_a_sum_over_a_dim_of_one_is_a_part_of_the_formula() -> None:
    cost = contract.estimate(b=4, i=8, o=3)
    assert cost.exact
    assert cost.formula == 2 * b * i * o - b * o * is_one(i)
    assert str(cost.formula) == "2*b*i*o - b*o*KroneckerDelta(1, i)"
    assert above_one(cost.formula) == 2 * b * i * o
    assert _at(cost, {"b": 4, "i": 1, "o": 3}) == contract.estimate(b=4, i=1, o=3).flops == 12


def test_an_estimate_at_one_gives_the_same_formula_exact() -> None:
    at_one = contract.estimate(b=4, i=1, o=3)
    assert at_one.exact and at_one.flops == 12
    assert at_one.formula == contract.estimate(b=4, i=8, o=3).formula


def test_a_branch_on_a_dim_being_one_is_fitted() -> None:
    cost = early.estimate(n=4, d=8)
    assert cost.exact
    assert cost.formula == 5 * d * n - 5 * n * is_one(d)
    assert early.estimate(n=4, d=1).flops == 0 == _at(cost, {"n": 4, "d": 1})


def test_a_sum_lowered_only_where_two_dims_are_one_is_seen() -> None:
    cost = two_sums.estimate(b=3, i=4, j=5, o=2)
    assert cost.exact
    assert cost.formula == 2 * b * i * j * o - b * o * is_one(i) * is_one(j)
    for ones in itertools.product((False, True), repeat=2):
        sizes = {"b": 3, "o": 2, "i": 1 if ones[0] else 6, "j": 1 if ones[1] else 7}
        assert _at(cost, sizes) == _estimate(two_sums, sizes).flops


def test_backward_parts_where_a_gradient_sums_over_a_batch_of_one() -> None:
    cost = contract.estimate(b=4, i=8, o=3, grad=("w",))
    # w's gradient is x^T @ grad: a sum over b, a multiply where b and i are 1
    assert cost.backward_formula == 2 * b * i * o - o * is_one(b) * is_one(i)
    one = contract.estimate(b=1, i=1, o=3, grad=("w",))
    sizes = {"b": 1, "i": 1, "o": 3}
    assert cost.backward_formula.xreplace({sympy.Symbol(k): v for k, v in sizes.items()}) == (
        one.backward_flops
    )


def test_record_rows_keep_the_parts_and_are_true_at_their_sizes() -> None:
    with record() as rec:
        contract(torch.randn(2, 1), torch.randn(1, 3))
        contract(torch.randn(2, 5), torch.randn(5, 3))
    assert rec.total.flops == 2 * 3 + 2 * 2 * 5 * 3
    for row in rec.calls:
        cost = row.cost()
        assert _at(cost, dict(cost.dims)) == cost.flops


def test_assert_flops_compares_a_book_formula_above_one() -> None:
    assert_flops(contract, "2*b*i*o", b=4, i=8, o=3)
    assert_flops(contract, 2 * b * i * o - b * o * is_one(i), b=4, i=8, o=3)


def test_a_formula_read_back_from_text_keeps_its_parts() -> None:
    cost = contract.estimate(b=4, i=8, o=3)
    text = cost.to_dict()["formula"]
    back = sympy.sympify(text)
    assert back.xreplace({b: 4, i: 1, o: 3}) == 12


BODIES: list[tuple[TypedFunction[..., Tensor], tuple[str, ...]]] = [
    (contract, ("b", "i", "o")),
    (early, ("n", "d")),
    (two_sums, ("b", "i", "j", "o")),
    (mixed, ("n", "d", "o")),
]


@settings(max_examples=12, deadline=None)
@given(
    body=st.sampled_from(BODIES),
    base=st.lists(st.integers(2, 9), min_size=4, max_size=4),
    other=st.lists(st.integers(1, 3), min_size=4, max_size=4),
)
def test_an_exact_formula_gives_the_count_at_other_sizes_one_included(
    body: tuple[TypedFunction[..., Tensor], tuple[str, ...]], base: list[int], other: list[int]
) -> None:
    function, names = body
    cost = _estimate(function, dict(zip(names, base, strict=False)))
    assert _at(cost, dict(cost.dims)) == cost.flops
    sizes = dict(zip(names, other, strict=False))
    if cost.exact:
        assert _at(cost, sizes) == _estimate(function, sizes).flops
