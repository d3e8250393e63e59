"""Sizes that are neither a monomial nor affine in the varied dims, as a product of one
factor per dim: a multi-query projection's width ``d + 2*d/n_head`` is ``d`` times
``1 + 2/n_head``, ``F.pdist``'s ``n*(n - 1)/2`` pairs a quadratic in ``n``, a valid
convolution's ``(h - k + 1)*(w - k + 1)`` positions two affine factors.

Such a fit needs more runs than the simple forms (:mod:`.fit`), so they are made only where
those forms fit some size of no op: each varied dim changed alone to a third value, and
one more run with every dim changed again. Each dim's factor is read from its three runs
(the base run and its two runs alone) as the first of these forms that gives all three,
``c*x**e``, ``a + b*x``, ``a + b/x``, else ``a + b*x + c*x**2`` (which any three points
give); the product is kept only where it gives the count of every run, the check run
and the last one among them, neither of which it was fitted from. Two dims whose factors
are lines that do not factor apart (a grouped-query projection's ``d + 2*d*n_kv/n_head``)
take one more run, with both changed together, and are fitted as ``a + b*u + c*v + e*u*v``
in the two (or their reciprocals), again kept only where every run agrees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Protocol

import sympy

__all__ = ["Runs", "parabola", "product_of_factors"]


class Runs(Protocol):
    """What a fit reads of its runs (a :class:`~.fit.Plan`)."""

    @property
    def varied(self) -> list[str]: ...  # the varied dims' names

    @property
    def runs(self) -> list[list[Any]]: ...

    @property
    def checked(self) -> bool: ...

    @property
    def more(self) -> bool: ...

    @property
    def check(self) -> int: ...

    @property
    def pairs(self) -> dict[tuple[int, int], int]: ...

    @property
    def mixed(self) -> set[tuple[int, int]]: ...

    def x(self, run: int, index: int) -> int: ...


_MAX_EXPONENT = 4


def product_of_factors(plan: Runs, values: tuple[int, ...]) -> tuple[sympy.Expr | None, bool]:
    """``values`` (one size in each run of ``plan``, which has ``more`` runs) as the base
    value times one factor per varied dim, each 1 at the base sizes; None where no such
    product gives every run's value. Exact: two runs confirm it that it was not fitted from."""
    count = len(plan.varied)
    check = plan.check
    if not plan.more or not plan.checked or len(values) != len(plan.runs):
        return None, False
    base = values[0]
    if base == 0:
        return None, False
    factors: list[tuple[Fraction, ...]] = []
    for index in range(count):
        runs = (0, 1 + index, check + 1 + index)
        xs = [Fraction(plan.x(run, index)) for run in runs]
        ratios = [Fraction(values[run], base) for run in runs]
        if len(set(xs)) < 3 or any(x <= 0 for x in xs):
            return None, False
        factor = _factor(xs, ratios)
        if factor is None:
            return None, False
        factors.append(factor)
    symbols = [sympy.Symbol(name) for name in plan.varied]
    lines = [i for i, factor in enumerate(factors) if factor[0] in (1, 2)]
    if all(_predicted(plan, factors, base, run) == value for run, value in enumerate(values)):
        expr: sympy.Expr = sympy.Integer(base)
        for index, factor in enumerate(factors):
            expr *= _formula(factor, symbols[index])
        return sympy.expand(expr), True
    if len(lines) != 2:
        return None, False
    pair = (lines[0], lines[1])
    if pair not in plan.pairs:
        plan.mixed.add(pair)  # (a run with both changed may show how they combine)
        return None, False
    return _bilinear(plan, values, factors, pair, symbols)


def _predicted(
    plan: Runs, factors: Sequence[tuple[Fraction, ...]], base: int, run: int
) -> Fraction:
    predicted = Fraction(base)
    for index, factor in enumerate(factors):
        predicted *= _at(factor, Fraction(plan.x(run, index)))
    return predicted


def _bilinear(
    plan: Runs,
    values: tuple[int, ...],
    factors: Sequence[tuple[Fraction, ...]],
    pair: tuple[int, int],
    symbols: Sequence[sympy.Symbol],
) -> tuple[sympy.Expr | None, bool]:
    """Two dims whose factors are lines (in ``x`` or ``1/x``) that do not factor apart:
    the base value times the other dims' factors times ``a + b*u + c*v + e*u*v`` (``u``,
    ``v`` the two dims or their reciprocals), through the base run, each one's run alone
    and the run of the pair; kept where it gives every run's value."""
    first, second = pair
    runs = (0, 1 + first, 1 + second, plan.pairs[pair])

    def variable(index: int, run: int) -> Fraction:
        x = Fraction(plan.x(run, index))
        return x if factors[index][0] == 1 else 1 / x

    u0, u1 = variable(first, 0), variable(first, 1 + first)
    v0, v1 = variable(second, 0), variable(second, 1 + second)
    if u0 == u1 or v0 == v1 or variable(first, runs[3]) != u1 or variable(second, runs[3]) != v1:
        return None, False
    base = values[0]
    rest = [factor for i, factor in enumerate(factors) if i not in pair]
    others = [i for i in range(len(factors)) if i not in pair]
    # bilinear interpolation on the grid {u0, u1} x {v0, v1} of the values over the rest
    grid = [Fraction(values[run], base) for run in runs]  # (u0 v0, u1 v0, u0 v1, u1 v1)
    du, dv = u1 - u0, v1 - v0
    slope_u = (grid[1] - grid[0]) / du
    slope_v = (grid[2] - grid[0]) / dv
    cross = (grid[3] - grid[2] - grid[1] + grid[0]) / (du * dv)

    def surface(u: Fraction, v: Fraction) -> Fraction:
        return grid[0] + slope_u * (u - u0) + slope_v * (v - v0) + cross * (u - u0) * (v - v0)

    for run, value in enumerate(values):
        predicted = Fraction(base) * surface(variable(first, run), variable(second, run))
        for index, factor in zip(others, rest, strict=True):
            predicted *= _at(factor, Fraction(plan.x(run, index)))
        if predicted != value:
            return None, False

    def term(index: int) -> sympy.Expr:
        symbol = symbols[index]
        return symbol if factors[index][0] == 1 else 1 / symbol

    def number(value: Fraction) -> sympy.Expr:
        return sympy.Rational(value.numerator, value.denominator)

    u, v = term(first), term(second)
    expr: sympy.Expr = number(grid[0])
    expr += number(slope_u) * (u - number(u0)) + number(slope_v) * (v - number(v0))
    expr += number(cross) * (u - number(u0)) * (v - number(v0))
    expr *= sympy.Integer(base)
    for index, factor in zip(others, rest, strict=True):
        expr *= _formula(factor, symbols[index])
    return sympy.expand(expr), True


# A factor is (form, coefficients): form 0 ``c*x**e`` as (0, c, e), 1 ``a + b*x`` as
# (1, a, b), 2 ``a + b/x`` as (2, a, b), 3 ``a + b*x + c*x**2`` as (3, a, b, c).


def _factor(xs: Sequence[Fraction], ratios: Sequence[Fraction]) -> tuple[Fraction, ...] | None:
    """The first form through the three points ``(xs[i], ratios[i])``."""
    for fit in (_power, _line, _reciprocal_line):
        found = fit(xs, ratios)
        if found is not None and all(_at(found, x) == r for x, r in zip(xs, ratios, strict=True)):
            return found
    return parabola(xs, ratios)


def _power(xs: Sequence[Fraction], ratios: Sequence[Fraction]) -> tuple[Fraction, ...] | None:
    step, ratio = xs[1] / xs[0], ratios[1]
    for exponent in range(-_MAX_EXPONENT, _MAX_EXPONENT + 1):
        if step**exponent == ratio:
            return (Fraction(0), ratios[0] / xs[0] ** exponent, Fraction(exponent))
    return None


def _line(xs: Sequence[Fraction], ratios: Sequence[Fraction]) -> tuple[Fraction, ...]:
    slope = (ratios[1] - ratios[0]) / (xs[1] - xs[0])
    return (Fraction(1), ratios[0] - slope * xs[0], slope)


def _reciprocal_line(xs: Sequence[Fraction], ratios: Sequence[Fraction]) -> tuple[Fraction, ...]:
    slope = (ratios[1] - ratios[0]) / (1 / xs[1] - 1 / xs[0])
    return (Fraction(2), ratios[0] - slope / xs[0], slope)


def parabola(xs: Sequence[Fraction], ratios: Sequence[Fraction]) -> tuple[Fraction, ...]:
    """``a + b*x + c*x**2`` through the three points (Lagrange, exact rationals)."""
    coefficients = [Fraction(0)] * 3
    for i, (x, r) in enumerate(zip(xs, ratios, strict=True)):
        others = [z for j, z in enumerate(xs) if j != i]
        scale = r / math.prod((x - z for z in others), start=Fraction(1))
        # (x - z0)(x - z1) = z0*z1 - (z0 + z1)*x + x**2
        coefficients[0] += scale * others[0] * others[1]
        coefficients[1] -= scale * (others[0] + others[1])
        coefficients[2] += scale
    return (Fraction(3), *coefficients)


def _at(factor: tuple[Fraction, ...], x: Fraction) -> Fraction:
    form = factor[0]
    if form == 0:
        return factor[1] * x ** int(factor[2])
    if form == 1:
        return factor[1] + factor[2] * x
    if form == 2:
        return factor[1] + factor[2] / x
    return factor[1] + factor[2] * x + factor[3] * x**2


def _formula(factor: tuple[Fraction, ...], symbol: sympy.Symbol) -> sympy.Expr:
    def number(value: Fraction) -> sympy.Expr:
        return sympy.Rational(value.numerator, value.denominator)

    form = factor[0]
    if form == 0:
        return number(factor[1]) * symbol ** int(factor[2])
    if form == 1:
        return number(factor[1]) + number(factor[2]) * symbol
    if form == 2:
        return number(factor[1]) + number(factor[2]) / symbol
    return number(factor[1]) + number(factor[2]) * symbol + number(factor[3]) * symbol**2
