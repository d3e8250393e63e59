"""Arithmetic over dim names: ``flops=`` formulas and symbolic axes such as ``n+1``.

A formula is parsed with :mod:`ast` and only names, integers (Python's literal rules, so
``1_000`` and ``0x10`` are integers), ``+ - * / // **``, unary signs and parentheses are
accepted; nothing is ever passed to ``eval``. Everything is bounded before any arithmetic
runs: the text's length, the nesting depth, exponents (constant integers from 0 to
:data:`MAX_EXPONENT`) and the size of every value (at most :data:`MAX_BITS` bits), so a
hostile formula such as ``9**9**9`` is a :class:`~typedflops.syntax.Problem` within
microseconds, never a hang. Evaluation at given sizes is bounded the same way.
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeAlias

from . import Problem

__all__ = [
    "GRAMMAR",
    "MAX_BITS",
    "MAX_DEPTH",
    "MAX_EXPONENT",
    "MAX_LENGTH",
    "Formula",
    "Integer",
    "Name",
    "Negative",
    "Node",
    "Operation",
    "parse_formula",
    "shorten",
]

#: Said after every grammar mistake.
GRAMMAR = "only dimension names, integers, + - * / // ** and parentheses are allowed"
#: The longest formula accepted, in characters.
MAX_LENGTH = 1000
#: The deepest nesting of operations and parentheses accepted.
MAX_DEPTH = 64
#: The largest exponent accepted (exponents are constant integers from 0 to this).
MAX_EXPONENT = 64
#: No value (a literal, a constant part, a result at given sizes) may need more bits.
MAX_BITS = 256

Number: TypeAlias = int | Fraction


@dataclass(frozen=True)
class Name:
    """A dim name."""

    id: str


@dataclass(frozen=True)
class Integer:
    """An integer literal."""

    value: int


@dataclass(frozen=True)
class Negative:
    """``-operand``."""

    operand: Node


@dataclass(frozen=True)
class Operation:
    """``left op right`` with ``op`` one of ``+ - * / // **``."""

    op: str
    left: Node
    right: Node


Node: TypeAlias = Name | Integer | Negative | Operation

_OPERATORS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Pow: "**",
}


def _bits(value: Number) -> int:
    if isinstance(value, int):
        return value.bit_length()
    return max(value.numerator.bit_length(), value.denominator.bit_length())


def _at(text: str) -> str:
    return f" in {text!r}" if text else ""


def _bounded(value: Number, text: str) -> Number:
    if _bits(value) > MAX_BITS:
        raise Problem(f"a value{_at(text)} is too large (more than {MAX_BITS} bits)")
    return value


def apply(op: str, left: Number, right: Number, text: str) -> Number:
    """``left op right`` with every bound checked before the arithmetic runs.

    ``/`` is exact (an ``int`` when it divides, else a ``Fraction``); ``text`` names the
    operation in a :class:`Problem` (empty: the whole formula).

    >>> apply("/", 6, 4, "n/4"), apply("//", 6, 4, "n//4")
    (Fraction(3, 2), 1)
    >>> apply("**", 2**200, 2, "n**2")
    Traceback (most recent call last):
      ...
    typedflops.syntax.Problem: a value in 'n**2' is too large (more than 256 bits)
    """
    if op == "+":
        return _bounded(left + right, text)
    if op == "-":
        return _bounded(left - right, text)
    if op == "*":
        if _bits(left) + _bits(right) > MAX_BITS + 1:
            raise Problem(f"a value{_at(text)} is too large (more than {MAX_BITS} bits)")
        return _bounded(left * right, text)
    if op in ("/", "//"):
        if right == 0:
            raise Problem(f"division by zero{_at(text)}")
        quotient = Fraction(left) / Fraction(right)
        if op == "//":
            return math.floor(quotient)
        return quotient.numerator if quotient.denominator == 1 else quotient
    assert op == "**"
    if not isinstance(right, int) or not 0 <= right <= MAX_EXPONENT:
        raise Problem(f"exponents are integers from 0 to {MAX_EXPONENT}, not {right}{_at(text)}")
    if _bits(left) * right > MAX_BITS + right:
        raise Problem(f"a value{_at(text)} is too large (more than {MAX_BITS} bits)")
    return _bounded(left**right, text)


Evaluator: TypeAlias = Callable[[Mapping[str, int]], Number]


@dataclass(frozen=True)
class Formula:
    """A parsed formula: ``text`` as written, its ``tree``, the dim ``names`` it uses, and
    ``constant`` (its value when it uses no names, else None).

    >>> formula = parse_formula("2*batch*d_in*d_out")
    >>> sorted(formula.names)
    ['batch', 'd_in', 'd_out']
    >>> formula.evaluate({"batch": 8, "d_in": 4, "d_out": 3})
    192
    """

    text: str
    tree: Node
    names: frozenset[str]
    constant: Number | None

    @functools.cached_property
    def _evaluator(self) -> Evaluator:
        return _compile(self.tree, self.text)

    def evaluate(self, sizes: Mapping[str, int]) -> Number:
        """The value at ``sizes`` (bounded: a :class:`Problem` for a value past
        :data:`MAX_BITS` bits or a division by zero; ``KeyError`` for a missing name,
        ``TypeError`` for a size that is not an int)."""
        return self._evaluator(sizes)


def _compile(node: Node, text: str) -> Evaluator:
    if isinstance(node, Integer):
        value = node.value
        return lambda sizes: value
    if isinstance(node, Name):
        name = node.id

        def get(sizes: Mapping[str, int]) -> Number:
            size = sizes[name]
            if not isinstance(size, int):
                raise TypeError(f"{name} is {size!r}, not an int")
            return _bounded(size, name)

        return get
    if isinstance(node, Negative):
        inner = _compile(node.operand, text)
        return lambda sizes: -inner(sizes)
    left, right, op = _compile(node.left, text), _compile(node.right, text), node.op
    return lambda sizes: apply(op, left(sizes), right(sizes), "")


def shorten(text: object, width: int = 60) -> object:
    """``text`` as it is quoted in a message: a long str is cut to ``width`` characters.

    >>> shorten("n+" * 40 + "n")
    'n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n+n...'
    """
    if isinstance(text, str) and len(text) > width:
        return text[: width - 3] + "..."
    return text


def _grammar_problem(what: str) -> Problem:
    return Problem(f"{what}; {GRAMMAR}")


def _nesting(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
    return deepest


def parse_formula(text: object) -> Formula:
    """Parse ``text`` into a :class:`Formula`, or raise :class:`Problem` saying why not.

    >>> parse_formula("n + 1_000").evaluate({"n": 24})
    1024
    >>> parse_formula("9**9**9")
    Traceback (most recent call last):
      ...
    typedflops.syntax.Problem: exponents are integers from 0 to 64, not 387420489
    >>> parse_formula(123)
    Traceback (most recent call last):
      ...
    typedflops.syntax.Problem: a formula is a str such as "2*batch*d_in", not int
    """
    if not isinstance(text, str):
        raise Problem(f'a formula is a str such as "2*batch*d_in", not {type(text).__name__}')
    return _parse(text)


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> Formula:
    if len(text) > MAX_LENGTH:
        raise Problem(f"the formula is {len(text)} characters long; at most {MAX_LENGTH}")
    if _nesting(text) > MAX_DEPTH:
        raise Problem(f"the formula nests more than {MAX_DEPTH} levels deep")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise _grammar_problem(f"not a valid expression ({exc.msg})") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise _grammar_problem(f"not a valid expression ({type(exc).__name__})") from None
    names: set[str] = set()
    node, constant = _convert(tree.body, _Source(text.strip()), names, 0)
    return Formula(text=text, tree=node, names=frozenset(names), constant=constant)


@dataclass(frozen=True)
class _Source:
    text: str

    def of(self, node: ast.expr) -> str:
        """The node as the user wrote it."""
        return ast.get_source_segment(self.text, node) or ast.unparse(node)

    def at(self, node: ast.expr) -> str:
        """The node as the user wrote it, or "" when it is the whole formula."""
        segment = self.of(node)
        return "" if segment == self.text else segment


def _convert(
    node: ast.expr, source: _Source, names: set[str], depth: int
) -> tuple[Node, Number | None]:
    """The node and its constant value (None when it uses names), checked and bounded."""
    if depth > MAX_DEPTH:
        raise Problem(f"the formula nests more than {MAX_DEPTH} levels deep")
    if isinstance(node, ast.Name):
        names.add(node.id)
        return Name(node.id), None
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Integer(node.value), _bounded(node.value, source.at(node))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner, value = _convert(node.operand, source, names, depth + 1)
        if isinstance(node.op, ast.UAdd):
            return inner, value
        return Negative(inner), None if value is None else -value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        op = _OPERATORS[type(node.op)]
        left, left_value = _convert(node.left, source, names, depth + 1)
        right, right_value = _convert(node.right, source, names, depth + 1)
        if op == "**" and right_value is None:
            raise Problem(
                f"exponents are integers from 0 to {MAX_EXPONENT}, "
                f"not {source.of(node.right)!r}{_at(source.at(node))}"
            )
        if op in ("/", "//") and right_value == 0:
            raise Problem(f"division by zero{_at(source.at(node))}")
        if right_value is None or (left_value is None and op != "**"):
            return Operation(op, left, right), None
        # Constant parts are computed now, bounded, so a hostile constant fails here; a
        # name's power is checked with base 1 (its exponent's bounds).
        try:
            value = apply(op, 1 if left_value is None else left_value, right_value, "")
        except Problem:
            apply(op, 1 if left_value is None else left_value, right_value, source.at(node))
            raise
        return Operation(op, left, right), None if left_value is None else value
    what = f"{source.of(node)!r} is not allowed"
    if isinstance(node, ast.Call):
        what = f"function calls such as {source.of(node)!r} are not allowed"
    elif isinstance(node, ast.Constant):
        what = f"the literal {node.value!r} is not an integer"
    raise _grammar_problem(what)
