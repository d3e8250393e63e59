"""A package with ``typing`` hints of before PEP 585, run under ``--typedflops`` with pytester.

``legacy_pkg`` writes ``Dict[str, Any]``, ``Callable[..., Tensor]`` and ``Iterator[str]``
(valid hints, which beartype flags as deprecated whenever it compiles a check of them),
one hint beartype cannot check at all (``list[int, str]``) and a method typed with a type
variable whose bound is a string (``TypeVar("M", bound="Model")``). The run turns beartype's
deprecation warnings into errors: none may reach the user's tests, whose calls are valid,
and the hint beartype rejects leaves its function unchecked, said once with its file:line,
instead of failing every call; the type variable is checked against its bound, resolved in
the package's module.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

LEGACY_PKG = """
from typing import Any, Callable, Dict, Iterator, Optional, TypeVar

import torch
from jaxtyping import Float
from torch import Tensor


def apply(fn: Callable[..., Tensor], x: Float[Tensor, "n"]) -> Float[Tensor, "n"]:
    return fn(x)


def settings(x: Float[Tensor, "n"], extra: Optional[Dict[str, Any]] = None) -> int:
    return len(extra or {}) + x.shape[0]


def words(text: str) -> Iterator[str]:
    return iter(text.split())


def first(rows: list[int, str]) -> int:
    return rows[0]


M = TypeVar("M", bound="Model")


class Model:
    def cpu(self: M) -> M:
        return self
"""

TESTS = """
import re

import pytest
import torch

import legacy_pkg
from typedflops import ContractError


def test_callable_hint():
    assert legacy_pkg.apply(torch.neg, torch.ones(3)).tolist() == [-1.0, -1.0, -1.0]


def test_callable_hint_violated():
    message = "argument 'fn' violates its hint Callable[..., Tensor]"
    with pytest.raises(ContractError, match=re.escape(message)):
        legacy_pkg.apply(3, torch.ones(3))


def test_optional_dict_hint():
    assert legacy_pkg.settings(torch.ones(2), {"a": 1}) == 3


def test_iterator_hint():
    assert list(legacy_pkg.words("a b")) == ["a", "b"]


def test_hint_beartype_cannot_check():
    assert legacy_pkg.first([4, 5]) == 4


def test_type_variable_bound_named_by_a_string():
    model = legacy_pkg.Model()
    assert model.cpu() is model
    with pytest.raises(ContractError, match="argument 'self' violates its hint Model: int 3"):
        legacy_pkg.Model.cpu(3)
"""

ARGS = [
    "-p",
    "no:cacheprovider",
    "-p",
    "no:randomly",
    "-W",
    "error::beartype.roar.BeartypeDecorHintPepDeprecationWarning",
    "--typedflops=legacy_pkg",
]


def test_deprecated_typing_hints_pass_without_warnings(pytester: pytest.Pytester) -> None:
    pytester.mkpydir("legacy_pkg").joinpath("__init__.py").write_text(LEGACY_PKG)
    pytester.makepyfile(test_legacy=TESTS)
    pytester.makeini("[pytest]\npythonpath = .\n")
    result = pytester.runpytest_subprocess(*ARGS)
    result.assert_outcomes(passed=6)
    assert "warning" not in result.outlines[-1]
    start = result.outlines.index(next(x for x in result.outlines if "not checked --" in x))
    assert result.outlines[start].strip("- ") == "typedflops: 1 hint not checked"
    where = pytester.path / "legacy_pkg" / "__init__.py"
    assert result.outlines[start + 1].startswith(
        f"first() ({where}:21) is not checked: hint list[int, str]: beartype cannot check it ("
    )
