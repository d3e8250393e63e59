"""Safe arithmetic over dimension names: ``flops=`` formulas and symbolic axes such as ``n+1``.

A string is parsed with :mod:`ast` and only names, integer literals, ``+ - * / // **`` and
parentheses are accepted; nothing is ever passed to ``eval``. The same parse yields a
:class:`sympy.Expr` (for formulas) and a small evaluator (for checking an axis at runtime).
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import sympy

from .errors import SpecError

__all__ = ["Expression", "dim_symbol", "parse_expression"]

_BINARY: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}

_SYMPY_BINARY: dict[type[ast.operator], Callable[[sympy.Expr, sympy.Expr], sympy.Expr]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: lambda a, b: sympy.floor(a / b),
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}

Evaluator = Callable[[Mapping[str, int]], int]


def dim_symbol(name: str) -> sympy.Symbol:
    """The sympy symbol of a dimension name: a plain ``sympy.Symbol(name)``, so that users'
    own ``sympy.Symbol("batch")`` compares equal to ours."""
    return sympy.Symbol(name)


@dataclass(frozen=True)
class Expression:
    """A parsed arithmetic expression over dimension names.

    ``text`` is the source, ``names`` the dimension names it uses, ``sympy`` the same
    expression as a sympy object and ``evaluate(name_to_size)`` its value at given sizes.
    """

    text: str
    names: frozenset[str]
    sympy: sympy.Expr
    evaluate: Evaluator


def _fail(text: str, what: str, origin: str) -> SpecError:
    return SpecError(
        f"{origin} {text!r}: {what}; only dimension names, integers, + - * / // ** and "
        "parentheses are allowed"
    )


def _compile(node: ast.expr, text: str, origin: str) -> tuple[Evaluator, sympy.Expr, set[str]]:
    if isinstance(node, ast.Name):
        name = node.id

        def get(sizes: Mapping[str, int]) -> int:
            return sizes[name]

        return get, dim_symbol(name), {name}
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
        return (lambda sizes: value), sympy.Integer(value), set()
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner, inner_sym, names = _compile(node.operand, text, origin)
        if isinstance(node.op, ast.UAdd):
            return inner, inner_sym, names
        return (lambda sizes: -inner(sizes)), -inner_sym, names
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, left_sym, left_names = _compile(node.left, text, origin)
        right, right_sym, right_names = _compile(node.right, text, origin)
        apply = _BINARY[type(node.op)]

        def binary(sizes: Mapping[str, int]) -> int:
            return apply(left(sizes), right(sizes))

        combined = _SYMPY_BINARY[type(node.op)](left_sym, right_sym)
        return binary, combined, left_names | right_names
    what = f"{ast.unparse(node)!r} is not allowed"
    if isinstance(node, ast.Call):
        what = f"function calls such as {ast.unparse(node)!r} are not allowed"
    elif isinstance(node, ast.Constant):
        what = f"the literal {node.value!r} is not an integer"
    raise _fail(text, what, origin)


@functools.lru_cache(maxsize=4096)
def parse_expression(text: str, origin: str = "formula") -> Expression:
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
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise _fail(text, f"not a valid expression ({exc.msg})", origin) from None
    evaluate, sym, names = _compile(tree.body, text, origin)
    return Expression(text=text, names=frozenset(names), sympy=sym, evaluate=evaluate)
