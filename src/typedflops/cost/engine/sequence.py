"""Counts of a body whose ops change with a size: ``for _ in range(n): x = x * 2`` runs
``n`` ops, so its count is a polynomial one degree up in ``n`` (``d*n**2``), which no op
by op fit can see.

Such a size is held at several values; at each the ops are fitted in the other sizes as
usual, giving each count as a formula whose coefficients are numbers; those formulas,
one per value, are interpolated as a polynomial in the size (Lagrange, exact rationals),
of the least degree that predicts a value not used to find it. Where none up to degree
:data:`MAX_DEGREE` does (``range(n // 2)``, ``if n > 100``), there is no formula.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import sympy

from ..types import Term

__all__ = ["MAX_DEGREE", "interpolated", "points_from"]

MAX_DEGREE = 4


def points_from(value: int) -> Iterator[int]:
    """The values a size is held at: its own first, then the next ones up (a loop over the
    size stays short), enough for a polynomial of degree :data:`MAX_DEGREE` and a check."""
    yield value
    for step in range(1, MAX_DEGREE + 4):
        yield value + step


def interpolated(
    points: Sequence[tuple[int, dict[str, Term]]], symbol: sympy.Symbol
) -> dict[str, Term] | None:
    """Each term as a polynomial in ``symbol`` through all points but the last, if the
    polynomial gives the last point's formula there (None otherwise). The count is the
    first point's; the formula is exact when every point's was."""
    if len(points) < 2:
        return None
    fitted, check = points[:-1], points[-1]
    found: dict[str, Term] = {}
    for name, first in fitted[0][1].items():
        formula = _lagrange([(x, terms[name].formula) for x, terms in fitted], symbol)
        predicted = formula.xreplace({symbol: sympy.Integer(check[0])})
        if sympy.expand(predicted - check[1][name].formula) != 0:
            return None
        exact = all(terms[name].exact for _, terms in points)
        found[name] = Term(first.count, _tidy(formula), exact)
    return found


def _lagrange(points: Sequence[tuple[int, sympy.Expr]], symbol: sympy.Symbol) -> sympy.Expr:
    """The polynomial of least degree through ``points`` (values are formulas in other
    symbols: the polynomial's coefficients are formulas in them)."""
    result: sympy.Expr = sympy.Integer(0)
    for index, (x, y) in enumerate(points):
        basis: sympy.Expr = sympy.Integer(1)
        for other, (z, _) in enumerate(points):
            if other != index:
                basis *= (symbol - z) / sympy.Integer(x - z)
        result += y * basis
    return sympy.expand(result)


def _tidy(formula: sympy.Expr) -> sympy.Expr:
    return sympy.factor(formula) if formula.free_symbols else formula
