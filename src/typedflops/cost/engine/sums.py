"""Sizes that are a sum of one part per dim, where neither the simple forms (:mod:`.fit`)
nor a product of factors (:mod:`.families`) fit: two inputs flattened and joined,
``n*n + d*d`` elements, or ``n**2 + 3*d + 5``.

Read from the same runs as a product of factors: each dim's part is the polynomial of
degree at most 2 through its three runs (the base run and its two runs alone), and the sum
of the base value and each part's change is kept only where it gives the count of every
run, the check run and the last one among them, none of which it was fitted from. Where
the sum misses, each pair of the dims that change the size (at most :data:`MOST_PAIRS`)
may add a product of their changes, ``n*n + n*d``: its coefficient is read from one more
run with both changed, and the sum is again kept only where the check runs agree. A size
of higher degree (``n*n*d + d``) is none of these: it stays unfitted (a count, not
exact).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import sympy

from .families import Runs, parabola

__all__ = ["MOST_PAIRS", "sum_of_parts"]

#: The most pairs of dims whose products a sum may hold (each takes a run).
MOST_PAIRS = 3


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

    def change(run: int, index: int) -> Fraction:
        return Fraction(plan.x(run, index) - plan.x(0, index))

    def summed(run: int) -> Fraction:
        total = base
        for index in range(len(parts)):
            x, x0 = Fraction(plan.x(run, index)), Fraction(plan.x(0, index))
            total += part(index, x) - part(index, x0)
        return total

    cross: dict[tuple[int, int], Fraction] = {}
    if any(summed(run) != value for run, value in enumerate(values)):
        # (a product of two dims' changes for each pair of dims that change the size,
        # read from the run with both changed: ``n*n + n*d``)
        moving = [i for i, (_, b, c) in enumerate(parts) if b or c]
        pairs = list(itertools.combinations(moving, 2))
        if not pairs or len(pairs) > MOST_PAIRS:
            return None, False
        missing = [pair for pair in pairs if pair not in plan.pairs]
        if missing:
            plan.mixed.update(missing)  # (the runs with both changed: asked for)
            return None, False
        for first, second in pairs:
            run = plan.pairs[(first, second)]
            area = change(run, first) * change(run, second)
            if area == 0:
                return None, False
            cross[(first, second)] = (values[run] - summed(run)) / area

    def predicted(run: int) -> Fraction:
        total = summed(run)
        for (first, second), coefficient in cross.items():
            total += coefficient * change(run, first) * change(run, second)
        return total

    if any(predicted(run) != value for run, value in enumerate(values)):
        return None, False

    def number(value: Fraction) -> sympy.Expr:
        return sympy.Rational(value.numerator, value.denominator)

    symbols = [sympy.Symbol(name) for name in plan.varied]
    expr: sympy.Expr = number(base)
    for index, (a, b, c) in enumerate(parts):
        expr += number(b) * symbols[index] + number(c) * symbols[index] ** 2
        expr += number(a - part(index, Fraction(plan.x(0, index))))
    for (first, second), coefficient in cross.items():
        x0, y0 = (number(Fraction(plan.x(0, index))) for index in (first, second))
        expr += number(coefficient) * (symbols[first] - x0) * (symbols[second] - y0)
    return sympy.expand(expr), True
