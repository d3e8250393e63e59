"""Sizes that are a sum of one part per dim (``n*n + d*d`` elements, two inputs flattened
and joined) are fitted as such a sum from the runs a product of factors takes, and marked
exact only where runs not used to fit them agree; a product of two dims' changes is added
per pair (``n*n + n*d``) from one more run with both changed. A size of higher degree in
two dims (``n*n*d + d*d``) is none: a count, not exact. Each formula marked exact is
checked against real runs at other sizes (``record()``, forward and backward) and a hand
count."""

from __future__ import annotations

import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor

from typedflops import Cost, record, typed_flops

SLOW = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])

n, d = sympy.symbols("n d")


@typed_flops
def squares(a: Float[Tensor, "n n"], b: Float[Tensor, "d d"]) -> Float[Tensor, ""]:
    return torch.cat([a.flatten(), b.flatten()]).exp().sum()


@typed_flops
def square_and_rows(a: Float[Tensor, "n n"], b: Float[Tensor, " d"]) -> Float[Tensor, ""]:
    return torch.cat([a.flatten(), b, b, b]).exp().sum()


@typed_flops
def crossed(a: Float[Tensor, "n n"], x: Float[Tensor, "n d"]) -> Float[Tensor, ""]:
    return torch.cat([a.flatten(), x.flatten()]).exp().sum()


@typed_flops
def three_joined(
    a: Float[Tensor, "n n"], x: Float[Tensor, "n d"], y: Float[Tensor, "m d"]
) -> Float[Tensor, ""]:
    return torch.cat([a.flatten(), x.flatten(), y.flatten(), y.flatten()]).exp().sum()


@typed_flops
def cubed(
    a: Float[Tensor, "n n"], x: Float[Tensor, "n d"], b: Float[Tensor, "d d"]
) -> Float[Tensor, ""]:
    return torch.cat([(a[:, :, None] * x[:, None, :]).flatten(), b.flatten()]).exp().sum()


def _ran(function: object, *args: Tensor) -> tuple[int, int]:
    """Forward and backward FLOPs of a real run."""
    leaves = [arg.clone().requires_grad_(True) for arg in args]
    with record() as rec:
        out = function(*leaves)  # type: ignore[operator]
        out.backward()
    return rec.total.flops, rec.total.backward_flops


def _assert_holds(cost: Cost, function: object, *args: Tensor, sizes: dict[str, int]) -> None:
    forward, backward = _ran(function, *args)
    assert cost.forward.at(sizes) == forward, (cost.forward, sizes)
    assert cost.backward.at(sizes) == backward, (cost.backward, sizes)


def test_two_squares_joined_are_a_sum_of_squares() -> None:
    cost = squares.estimate(n=5, d=7, grad=("a", "b"))
    # exp once per element of the n*n + d*d joined, and a sum adding each of them
    assert sympy.expand(cost.formula - 2 * (n**2 + d**2)) == 0
    assert cost.forward.exact and cost.backward.exact
    for rows, width in [(1, 2), (3, 9), (11, 4)]:
        a, b = torch.randn(rows, rows), torch.randn(width, width)
        assert _ran(squares, a, b)[0] == 2 * (rows**2 + width**2)
        _assert_holds(cost, squares, a, b, sizes={"n": rows, "d": width})


@SLOW
@given(
    base=st.tuples(st.integers(2, 9), st.integers(2, 9)),
    other=st.tuples(st.integers(1, 20), st.integers(1, 20)),
)
def test_a_square_plus_rows_predicts_real_runs(
    base: tuple[int, int], other: tuple[int, int]
) -> None:
    cost = square_and_rows.estimate(n=base[0], d=base[1], grad=("a", "b"))
    assert cost.forward.exact
    assert sympy.expand(cost.formula - 2 * (n**2 + 3 * d)) == 0
    rows, width = other
    a, b = torch.randn(rows, rows), torch.randn(width)
    _assert_holds(cost, square_and_rows, a, b, sizes={"n": rows, "d": width})


def test_a_sum_with_products_of_two_dims_is_fitted_from_their_runs() -> None:
    cost = crossed.estimate(n=5, d=7, grad=("a", "x"))
    # exp and a sum over the n*n + n*d elements
    assert sympy.expand(cost.formula - 2 * (n**2 + n * d)) == 0
    assert cost.forward.exact and cost.backward.exact
    for rows, width in [(2, 3), (9, 4), (1, 11)]:
        a, x = torch.randn(rows, rows), torch.randn(rows, width)
        _assert_holds(cost, crossed, a, x, sizes={"n": rows, "d": width})
    joined = three_joined.estimate(n=5, d=7, m=3, grad=("a", "x", "y"))
    m = sympy.Symbol("m")
    assert sympy.expand(joined.formula - 2 * (n**2 + n * d + 2 * m * d)) == 0
    assert joined.forward.exact and joined.backward.exact
    for rows, width, others in [(2, 3, 4), (8, 1, 6)]:
        a, x, y = torch.randn(rows, rows), torch.randn(rows, width), torch.randn(others, width)
        _assert_holds(joined, three_joined, a, x, y, sizes={"n": rows, "d": width, "m": others})


def test_a_size_of_higher_degree_in_two_dims_is_a_count() -> None:
    # n*n*d products, then exp and a sum over the n*n*d + d*d elements joined
    cost = cubed.estimate(n=5, d=7)
    assert not cost.forward.exact
    a, x, b = torch.randn(5, 5), torch.randn(5, 7), torch.randn(7, 7)
    assert cost.flops == _ran(cubed, a, x, b)[0] == 175 + 2 * (175 + 49)
    assert cost.forward.holds_at(cost.dims)
