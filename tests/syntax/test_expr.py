"""Safe arithmetic over dim names: parsed with ``ast``, never ``eval``'d."""

from __future__ import annotations

import builtins
import re
from pathlib import Path
from typing import Any

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from typedflops import SpecError
from typedflops.syntax.expr import dim_symbol, parse_expression

batch, d_in, d_out, n = sympy.symbols("batch d_in d_out n")


@pytest.mark.parametrize(
    ("text", "formula", "sizes", "value"),
    [
        ("2*batch*d_in*d_out", 2 * batch * d_in * d_out, {"batch": 8, "d_in": 4, "d_out": 3}, 192),
        ("n+1", n + 1, {"n": 3}, 4),
        ("n - 1", n - 1, {"n": 3}, 2),
        ("-n + 10", 10 - n, {"n": 3}, 7),
        ("+n", n, {"n": 3}, 3),
        ("n**2", n**2, {"n": 5}, 25),
        ("n // 2", sympy.floor(n / 2), {"n": 7}, 3),
        ("(n + 1) * (n - 1)", (n + 1) * (n - 1), {"n": 4}, 15),
        ("  batch * 2  ", 2 * batch, {"batch": 3}, 6),
        ("7", sympy.Integer(7), {}, 7),
    ],
)
def test_parse_and_evaluate(
    text: str, formula: sympy.Expr, sizes: dict[str, int], value: int
) -> None:
    expression = parse_expression(text)
    assert expression.text == text
    assert sympy.simplify(expression.sympy - formula) == 0
    assert expression.evaluate(sizes) == value
    assert expression.names == frozenset(sizes)


def test_true_division_keeps_the_value() -> None:
    expression = parse_expression("n/2")
    assert expression.evaluate({"n": 6}) == 3
    assert expression.sympy == n / 2


def test_dim_symbols_equal_users_symbols() -> None:
    assert dim_symbol("batch") == sympy.Symbol("batch")
    assert parse_expression("batch").sympy == sympy.Symbol("batch")


def test_parse_is_cached() -> None:
    assert parse_expression("2*n*k") is parse_expression("2*n*k")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("2*(n", "not a valid expression"),
        ("", "not a valid expression"),
        ("n n", "not a valid expression"),
        ("abs(n)", "function calls such as 'abs(n)' are not allowed"),
        ("n.real", "'n.real' is not allowed"),
        ("x[0]", "'x[0]' is not allowed"),
        ("'n'", "the literal 'n' is not an integer"),
        ("1.5*n", "the literal 1.5 is not an integer"),
        ("True*n", "the literal True is not an integer"),
        ("n < 3", "'n < 3' is not allowed"),
        ("n and 1", "'n and 1' is not allowed"),
        ("n % 2", "'n % 2' is not allowed"),
        ("n @ n", "'n @ n' is not allowed"),
        ("~n", "'~n' is not allowed"),
        ("lambda: 1", "is not allowed"),
        ("[n]", "is not allowed"),
        ("f'{n}'", "is not allowed"),
    ],
)
def test_rejected(text: str, fragment: str) -> None:
    with pytest.raises(SpecError, match=re.escape(fragment)) as info:
        parse_expression(text, origin="flops=")
    message = str(info.value)
    assert message.startswith(f"flops= {text!r}: ")
    assert message.endswith(
        "only dimension names, integers, + - * / // ** and parentheses are allowed"
    )
    assert info.value.__cause__ is None


def test_never_evaluated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran"

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("eval/exec must never be called")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    text = f"__import__('os').system('touch {marker}')"
    with pytest.raises(SpecError, match="function calls such as"):
        parse_expression(text)
    assert not marker.exists()
    assert parse_expression("2*batch*d_in").evaluate({"batch": 2, "d_in": 3}) == 12


def test_missing_name_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        parse_expression("a*b").evaluate({"a": 2})


@settings(deadline=None)  # sympy is slow on a loaded machine; no timing is asserted
@given(
    a=st.integers(min_value=1, max_value=10_000),
    b=st.integers(min_value=1, max_value=10_000),
    c=st.integers(min_value=1, max_value=100),
)
def test_evaluate_agrees_with_sympy(a: int, b: int, c: int) -> None:
    expression = parse_expression("2*a*b + (a - c)**2 - b // c")
    sizes = {"a": a, "b": b, "c": c}
    expected = 2 * a * b + (a - c) ** 2 - b // c
    assert expression.evaluate(sizes) == expected
    substituted = expression.sympy.subs({sympy.Symbol(k): v for k, v in sizes.items()})
    assert int(substituted) == expected


@pytest.mark.parametrize(
    ("flops", "message"),
    [
        ("9**9**9", "flops= '9**9**9': exponents are integers from 0 to 64, not 387420489"),
        ("n**n**n", "flops= 'n**n**n': exponents are integers from 0 to 64, not 'n' in 'n**n'"),
        ("a/0", "flops= 'a/0': division by zero"),
        ("a/(b-b)", "flops= 'a/(b-b)': division by zero (a divisor is 0 whatever the sizes)"),
        ("(" * 100 + "n" + ")" * 100, "the formula nests more than 64 levels deep"),
        (123, 'flops= 123: a formula is a str such as "2*batch*d_in", not int'),
        (b"n", "flops= b'n': a formula is a str such as \"2*batch*d_in\", not bytes"),
    ],
)
def test_hostile_flops_fail_at_decoration(flops: object, message: str) -> None:
    from typedflops import typed_flops

    with pytest.raises(SpecError) as info:
        typed_flops(flops=flops)(lambda x: x)  # type: ignore[call-overload]
    assert message in str(info.value)
    assert info.value.__cause__ is None


def test_python_literals_are_integers() -> None:
    assert parse_expression("1_000*n").evaluate({"n": 2}) == 2000
    assert parse_expression("0x10*n").sympy == 16 * n


def test_long_formulas_are_shortened_in_messages() -> None:
    text = "n+" * 600 + "n"
    with pytest.raises(SpecError) as info:
        parse_expression(text, origin="flops=")
    assert str(info.value).startswith("flops= 'n+n+n+n")
    assert len(str(info.value)) < 150


def test_evaluation_is_bounded_at_call_time() -> None:
    expression = parse_expression("n**64", origin="symbolic axis")
    assert expression.evaluate({"n": 3}) == 3**64
    with pytest.raises(SpecError, match=r"symbolic axis 'n\*\*64': a value is too large"):
        expression.evaluate({"n": 2**40})
