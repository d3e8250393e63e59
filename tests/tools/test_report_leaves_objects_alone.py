"""``--typedflops-report`` costs calls by dry runs, which must never change the test's objects.

``factors_pkg.Factored`` is a plain class (not a module) whose ``__init__`` stores its two
tensor arguments and whose ``cached_property`` caches their product, the way real projects
hold factored matrices. The tests share one object (a module-scoped fixture): the report's
dry run of ``__init__`` after the first test must not leave storage-less tensors in it for
the next.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

FACTORS_PKG = """
from functools import cached_property

import torch
from jaxtyping import Float
from torch import Tensor


class Factored:
    def __init__(self, a: Float[Tensor, "m k"], b: Float[Tensor, "k n"]) -> None:
        self.a = a
        self.b = b

    @cached_property
    def product(self) -> Float[Tensor, "m n"]:
        return self.a @ self.b

    def transpose(self) -> "Factored":
        return Factored(self.b.T, self.a.T)
"""

TESTS = """
import pytest
import torch

from factors_pkg import Factored


@pytest.fixture(scope="module")
def factored():
    return Factored(torch.ones(2, 3), torch.ones(3, 4))


def test_product(factored):
    assert factored.product.tolist() == [[3.0] * 4] * 2


def test_transpose(factored):
    assert factored.transpose().product.tolist() == [[3.0] * 2] * 4


def test_still_real(factored):
    assert (factored.a.device.type, factored.b.device.type) == ("cpu", "cpu")
    assert factored.product.device.type == "cpu"
"""


def test_dry_runs_leave_the_objects_of_the_tests_alone(pytester: pytest.Pytester) -> None:
    pytester.mkpydir("factors_pkg").joinpath("__init__.py").write_text(FACTORS_PKG)
    pytester.makepyfile(test_factors=TESTS)
    pytester.makeini("[pytest]\npythonpath = .\n")
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--typedflops=factors_pkg",
        "--typedflops-report",
    )
    result.assert_outcomes(passed=3)
    start = result.outlines.index(next(x for x in result.outlines if " typedflops report " in x))
    assert [line.rstrip() for line in result.outlines[start + 1 : start + 7]] == [
        "function           calls  dims           formula  FLOPs/call  FLOPs",
        "-----------------  -----  -------------  -------  ----------  -----",
        "Factored.__init__      1  m=2, k=3, n=4  0                 0      0",
        "                       1  m=4, k=3, n=2  0                 0      0",
        "Factored.product       1  m=2, n=4       48               48     48",
        "                       1  m=4, n=2       48               48     48",
    ]
