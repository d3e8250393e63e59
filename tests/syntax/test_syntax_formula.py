"""Formulas in the grammar core: integers follow Python's literal rules, values follow
Python's exact arithmetic, and everything is bounded before it is computed."""

from __future__ import annotations

import ast
import operator
import unicodedata
from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from typedflops.syntax import Problem
from typedflops.syntax.formula import MAX_BITS, MAX_EXPONENT, parse_formula

# Integer literals written the ways Python allows, and ways it does not.
LITERAL_PARTS = st.sampled_from(
    [
        "0",
        "1",
        "7",
        "10",
        "1_000",
        "0x10",
        "0X1f",
        "0o17",
        "0b101",
        "00",
        "01",
        "1__0",
        "1_",
        "_1",
        "0x",
        "0b2",
        "1e3",
        "1.0",
        "1j",
        "\u0663",  # ARABIC-INDIC DIGIT THREE
        "\uff11",  # FULLWIDTH DIGIT ONE
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(LITERAL_PARTS, min_size=1, max_size=2))
def test_integer_literals_follow_python(parts: list[str]) -> None:
    text = "".join(parts)
    if text.isidentifier():  # "_1" is a name, as in Python (which normalizes names)
        assert parse_formula(text).names == {unicodedata.normalize("NFKC", text)}
        return
    try:
        expected = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        expected = None
    if type(expected) is not int:
        with pytest.raises(Problem):
            parse_formula(text)
        return
    formula = parse_formula(text)
    assert formula.constant == expected and formula.names == frozenset()


# Expressions as trees: (text, exact value) built together, so the oracle is Python's own
# arithmetic on the values, never an evaluation of the text.
Tree = tuple[str, Fraction]
OPERATORS: dict[str, Callable[[Fraction, Fraction], Fraction]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
}
SIZES = {"n": 7, "k": 3, "batch": 8}


def _leaf() -> st.SearchStrategy[Tree]:
    names = st.sampled_from(sorted(SIZES)).map(lambda n: (n, Fraction(SIZES[n])))
    numbers = st.integers(0, 50).map(lambda v: (str(v), Fraction(v)))
    return names | numbers


def _extend(children: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
    def combine(pair: tuple[Tree, Tree], op: str) -> Tree:
        (left, a), (right, b) = pair
        if op in OPERATORS:
            return f"({left}){op}({right})", OPERATORS[op](a, b)
        if op == "/":
            return (f"({left})/({right})", a / b) if b else (left, a)
        if op == "//":
            return (f"({left})//({right})", Fraction(a // b)) if b else (left, a)
        exponent = int(b) % 4
        return f"({left})**{exponent}", a**exponent

    return st.builds(
        combine, st.tuples(children, children), st.sampled_from([*OPERATORS, "/", "//", "**"])
    )


@settings(max_examples=300, deadline=None)
@given(st.recursive(_leaf(), _extend, max_leaves=8))
def test_values_follow_python_arithmetic(tree: Tree) -> None:
    text, value = tree
    assume(abs(value.numerator).bit_length() < MAX_BITS - 8)
    formula = parse_formula(text)
    assert Fraction(formula.evaluate(SIZES)) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("9**9**9", f"exponents are integers from 0 to {MAX_EXPONENT}, not 387420489"),
        ("n**n**n", "exponents are integers from 0 to 64, not 'n' in 'n**n'"),
        ("n**k", "exponents are integers from 0 to 64, not 'k'"),
        ("n**-1", "exponents are integers from 0 to 64, not -1"),
        ("2**65", "exponents are integers from 0 to 64, not 65"),
        ("a/0", "division by zero"),
        ("x + a//(3-3)", "division by zero in 'a//(3-3)'"),
        ("(" * 70 + "n" + ")" * 70, "the formula nests more than 64 levels deep"),
        ("-" * 70 + "n", "the formula nests more than 64 levels deep"),
        ("+".join(["n"] * 70), "the formula nests more than 64 levels deep"),
        ("n" * 1001, "the formula is 1001 characters long; at most 1000"),
        ("1" + "0" * 80, "a value is too large (more than 256 bits)"),
        ("2**64*2**64*2**64*2**64*2", "a value in '2**64*2**64*2**64*2**64' is too large"),
        ("n\0", "not a valid expression"),
    ],
)
def test_hostile_formulas_are_problems(text: str, reason: str) -> None:
    with pytest.raises(Problem) as info:
        parse_formula(text)
    assert info.value.reason.startswith(reason), info.value.reason


@pytest.mark.parametrize("value", [123, b"n", None, ["n"], 1.5])
def test_a_formula_is_a_str(value: object) -> None:
    with pytest.raises(Problem, match=f"a formula is a str .*, not {type(value).__name__}"):
        parse_formula(value)


def test_evaluation_is_bounded_too() -> None:
    formula = parse_formula("n**64*n**64")
    assert formula.evaluate({"n": 2}) == 2**128
    with pytest.raises(Problem, match="too large"):
        formula.evaluate({"n": 2**10})
    with pytest.raises(Problem, match="division by zero"):
        parse_formula("a/(b-c)").evaluate({"a": 1, "b": 2, "c": 2})
    with pytest.raises(KeyError):
        parse_formula("a*b").evaluate({"a": 2})
    with pytest.raises(TypeError):
        parse_formula("a*b").evaluate({"a": 2, "b": (1, 2)})  # type: ignore[dict-item]


def test_true_division_is_exact() -> None:
    assert parse_formula("n/2").evaluate({"n": 6}) == 3
    assert parse_formula("n/2").evaluate({"n": 7}) == Fraction(7, 2)
    assert parse_formula("n//2").evaluate({"n": 7}) == 3
    big = 2**200 + 1
    assert parse_formula("n/1").evaluate({"n": big}) == big  # no float rounding
