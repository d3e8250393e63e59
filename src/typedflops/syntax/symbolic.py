"""A parsed formula as a sympy expression, and what its sign is at every size.

Torch-free and free of typedflops' error classes, so that the mypy plugin says what the
runtime says (``flops="-n*d"`` is refused by both) from the same code. sympy is imported
when a formula is first converted: a mypy run without ``flops=`` never pays for it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import Problem
from .formula import Integer, Name, Negative, Node

if TYPE_CHECKING:
    import sympy

__all__ = ["negative_for_every_size", "to_sympy"]


def _floor_division(a: Any, b: Any) -> Any:
    import sympy

    return sympy.floor(a / b)


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": _floor_division,
    "/": operator.truediv,
    "**": operator.pow,
}


def to_sympy(node: Node) -> sympy.Expr:
    """The formula's tree as a sympy expression, each name a plain ``sympy.Symbol``.

    >>> from typedflops.syntax.formula import parse_formula
    >>> to_sympy(parse_formula("2*batch*d_in - 1").tree)
    2*batch*d_in - 1
    """
    import sympy

    if isinstance(node, Name):
        return sympy.Symbol(node.id)
    if isinstance(node, Integer):
        return sympy.Integer(node.value)
    if isinstance(node, Negative):
        return -to_sympy(node.operand)
    right = to_sympy(node.right)
    if node.op in ("/", "//") and right == 0:
        raise Problem("division by zero (a divisor is 0 whatever the sizes)")
    result: sympy.Expr = _BINARY[node.op](to_sympy(node.left), right)
    return result


def negative_for_every_size(formula: sympy.Expr) -> bool:
    """Whether a formula is below 0 at every positive size (``-n*d``); one that is only
    sometimes (``n - d``) is refused where it is evaluated.

    >>> import sympy
    >>> minus, difference = sympy.sympify("-n*d"), sympy.sympify("n - d")
    >>> negative_for_every_size(minus), negative_for_every_size(difference)
    (True, False)
    """
    import sympy

    positive = {
        symbol: sympy.Symbol(str(symbol), positive=True, integer=True)
        for symbol in formula.free_symbols
    }
    return bool(formula.xreplace(positive).is_negative)
