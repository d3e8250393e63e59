"""Sizes that are a sum of one part per dim, where neither the simple forms (:mod:`.fit`)
nor a product of factors (:mod:`.families`) fit: two inputs flattened and joined,
``n*n + d*d`` elements, or ``n**2 + 3*d + 5``.

Read from the same runs as a product of factors: each dim's part is the polynomial of
degree at most 2 through its three runs (the base run and its two runs alone), and the sum
of the base value and each part's change is kept only where it gives the count of every
run, the check run and the last one among them (and any run of a pair), none of which it
was fitted from. A part that needs a product of two dims (``n*d + n*n``) is no sum: the
size stays unfitted (a count, not exact).
"""

from __future__ import annotations

from fractions import Fraction

import sympy

from .families import Runs, parabola

__all__ = ["sum_of_parts"]


def sum_of_parts(plan: Runs, values: tuple[int, ...]) -> tuple[sympy.Expr | None, bool]:
    """``values`` (one size in each run of ``plan``, which has ``more`` runs) as the base
    value plus one polynomial part per varied dim (each 0 at the base sizes); None where
    no such sum gives every run's value. Exact: two runs confirm it that it was not
    fitted from."""
    check = plan.check
    if not plan.more or not plan.checked or len(values) != len(plan.runs):
        return None, False
    base = Fraction(values[0])
    parts: list[tuple[Fraction, Fraction, Fraction]] = []
    for index in range(len(plan.varied)):
        runs = (0, 1 + index, check + 1 + index)
        xs = [Fraction(plan.x(run, index)) for run in runs]
        if len(set(xs)) < 3:
            return None, False
        _, a, b, c = parabola(xs, [Fraction(values[run]) for run in runs])
        parts.append((a, b, c))

    def part(index: int, x: Fraction) -> Fraction:
        a, b, c = parts[index]
        return a + b * x + c * x**2

    for run, value in enumerate(values):
        predicted = base
        for index in range(len(parts)):
            predicted += part(index, Fraction(plan.x(run, index))) - part(
                index, Fraction(plan.x(0, index))
            )
        if predicted != value:
            return None, False

    def number(value: Fraction) -> sympy.Expr:
        return sympy.Rational(value.numerator, value.denominator)

    expr: sympy.Expr = number(base)
    for index, (a, b, c) in enumerate(parts):
        symbol = sympy.Symbol(plan.varied[index])
        expr += number(b) * symbol + number(c) * symbol**2
        expr += number(a - part(index, Fraction(plan.x(0, index))))
    return sympy.expand(expr), True
