"""Safe arithmetic over dimension names: ``flops=`` formulas and symbolic axes such as ``n+1``.

The grammar core (:mod:`typedflops.syntax.formula`) parses a string with :mod:`ast`, accepts
only names, integer literals, ``+ - * / // **`` and parentheses, and bounds everything (length,
depth, exponents, value sizes) before any arithmetic runs; nothing is ever passed to ``eval``.
Here the parse becomes a :class:`sympy.Expr` (for formulas) and a bounded evaluator (for
checking an axis at runtime); a mistake is a :class:`SpecError` naming where it was written.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import sympy

from ..errors import SpecError
from . import Problem
from .formula import Formula, parse_formula, shorten
from .symbolic import to_sympy

__all__ = ["Expression", "dim_symbol", "parse_expression"]


def dim_symbol(name: str) -> sympy.Symbol:
    """The sympy symbol of a dimension name: a plain ``sympy.Symbol(name)``, so that users'
    own ``sympy.Symbol("batch")`` compares equal to ours."""
    return sympy.Symbol(name)


@dataclass(frozen=True)
class Expression:
    """A parsed arithmetic expression over dimension names.

    ``text`` is the source, ``names`` the dimension names it uses, ``sympy`` the same
    expression as a sympy object and ``evaluate(name_to_size)`` its exact value at given
    sizes (an ``int``, or a ``Fraction`` where ``/`` does not divide; bounded, so a value
    past 256 bits or a zero divisor raises :class:`SpecError`).
    """

    text: str
    names: frozenset[str]
    sympy: sympy.Expr
    formula: Formula
    origin: str

    def evaluate(self, sizes: Mapping[str, int]) -> int | Fraction:
        """The value at ``sizes`` (``KeyError`` for a missing name)."""
        try:
            return self.formula.evaluate(sizes)
        except Problem as problem:
            raise SpecError.at(f"{self.origin} {shorten(self.text)!r}", problem.reason) from None


def parse_expression(text: object, origin: str = "formula") -> Expression:
    """Parse ``text`` into an :class:`Expression`, raising :class:`SpecError` if it is not one.

    >>> e = parse_expression("2*batch*d_in*d_out")
    >>> e.sympy
    2*batch*d_in*d_out
    >>> e.evaluate({"batch": 8, "d_in": 4, "d_out": 3})
    192
    >>> parse_expression("__import__('os')")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
      ...
    typedflops.errors.SpecError: formula "__import__('os')": function calls such as ... allowed
    """
    if not isinstance(text, str):
        try:
            parse_formula(text)
        except Problem as problem:
            raise SpecError.at(f"{origin} {shorten(text)!r}", problem.reason) from None
    assert isinstance(text, str)
    return _parse(text, origin)


@functools.lru_cache(maxsize=4096)
def _parse(text: str, origin: str) -> Expression:
    try:
        formula = parse_formula(text)
        expression = to_sympy(formula.tree)
    except Problem as problem:
        raise SpecError.at(f"{origin} {shorten(text)!r}", problem.reason) from None
    return Expression(
        text=text, names=formula.names, sympy=expression, formula=formula, origin=origin
    )
