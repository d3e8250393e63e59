"""A package typed the way real projects type theirs, run under ``--typedflops`` with pytester.

``shapes_pkg`` mixes torch tensors with numpy arrays in one union, takes a duck array (an
object with a shape and a dtype, no torch), annotates ``*args`` both rightly (each
argument) and wrongly (as if the hint were the whole tuple), and has plain hints
everywhere. None of it is a reason to refuse the import; the wrong ``*args`` hint is
reported, in two lines, by the test that hits it; the report lists the rows, with and
without pytest-xdist (``-n 2``).
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SHAPES_PKG = '''
from typing import Tuple, Union

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor


class Grid:
    """A duck array: a shape and a dtype, nothing else."""

    def __init__(self, rows: int, cols: int) -> None:
        self.shape = (rows, cols)
        self.dtype = np.dtype("float32")


def positions(tokens: Union[Int[Tensor, "pos"], Int[np.ndarray, "pos"]]) -> Int[Tensor, "pos"]:
    return torch.arange(len(tokens))


def weighted(grid: Float[Grid, "rows cols"], weights: Float[Tensor, "rows cols"]) -> float:
    return float(weights.sum())


def stack(*rows: Float[Tensor, "d"]) -> Float[Tensor, "n d"]:
    return torch.stack(rows)


def project(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
    return x @ w


class Pair:
    def __init__(self, *parts: Tuple[Tensor, Tensor], name: str = "pair") -> None:
        self.parts = parts
        self.name = name
'''

TESTS = """
import numpy as np
import pytest
import torch

import shapes_pkg
from typedflops import ContractError, ShapeError


def test_union_of_tensor_and_ndarray():
    assert shapes_pkg.positions(torch.tensor([5, 6, 7])).tolist() == [0, 1, 2]
    assert shapes_pkg.positions(np.array([5, 6])).tolist() == [0, 1]


def test_duck_array_shares_dims_with_tensors():
    assert shapes_pkg.weighted(shapes_pkg.Grid(2, 3), torch.ones(2, 3)) == 6.0
    with pytest.raises(ShapeError, match="needs rows=2"):
        shapes_pkg.weighted(shapes_pkg.Grid(2, 3), torch.ones(3, 3))


def test_star_args_each_checked():
    assert shapes_pkg.stack(torch.ones(4), torch.zeros(4)).shape == (2, 4)
    with pytest.raises(ShapeError):
        shapes_pkg.stack(torch.ones(4), torch.zeros(5))


def test_project():
    assert shapes_pkg.project(torch.ones(3, 4), torch.ones(4, 2)).shape == (3, 2)
    shapes_pkg.project(torch.ones(5, 4), torch.ones(4, 2))


def test_plain_hint():
    with pytest.raises(ContractError, match="violates its hint int"):
        shapes_pkg.Grid(2, "3")


def test_pair():
    shapes_pkg.Pair(torch.ones(2), torch.ones(2))
"""

ARGS = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:randomly"]


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.mkpydir("shapes_pkg").joinpath("__init__.py").write_text(SHAPES_PKG)
    pytester.makepyfile(test_shapes=TESTS)
    pytester.makeini("[pytest]\npythonpath = .\n")
    return pytester


def _report(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if " typedflops report " in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("="))
    return [line.rstrip() for line in lines[start + 1 : end] if not line.startswith("---")]


def _check(result: pytest.RunResult) -> list[str]:
    result.assert_outcomes(passed=5, failed=1)
    text = "\n".join(result.outlines)
    assert "SpecError" not in text
    errors = [line for line in result.outlines if line.startswith("E   ")]
    assert errors == [
        "E   typedflops.errors.ContractError: Pair.__init__(): argument 'parts[0]' is a Tensor "
        "but its hint needs a tuple of 2",
        "E     (the hint of *parts is the type of each argument it collects, not of their tuple)",
    ]
    return _report(result.outlines)


EXPECTED_ROWS = [
    "function   calls  dims            formula  FLOPs/call  FLOPs",
    "positions      1  pos=3           0                 0      0",
    "               1  pos=2           0                 0      0",
    "project        1  n=3, d=4, k=2   2*d*k*n          48     48",
    "               1  n=5, d=4, k=2   2*d*k*n          80     80",
    "stack          1  d=4, n=2        0                 0      0",
    "weighted       1  rows=2, cols=3  as run            6      6",
    # float(weights.sum()) reads a value: no formula, said in words, never as a failure;
    # counted as it ran (6 FLOPs; reads 24 bytes and writes 4, float() reads those 4)
    "as run weighted(rows=2, cols=3): 6 FLOPs, 32 bytes per call, counted while the call "
    "ran; no formula, as the body reads tensor values (a tensor's value (.item(), bool(), "
    "int(), an `if` on a tensor) at __init__.py:23 (return float(weights.sum()))), which a "
    "dry run on meta tensors does not have",
]


def test_mixed_hints_run_and_the_star_args_mistake_is_reported(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(*ARGS, "--typedflops=shapes_pkg", "--typedflops-report")
    rows = _check(result)
    assert rows == EXPECTED_ROWS


def test_pytest_xdist_workers_send_their_rows(project: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    result = project.runpytest_subprocess(
        *ARGS, "-n", "2", "--typedflops=shapes_pkg", "--typedflops-report"
    )
    rows = _check(result)
    assert rows == EXPECTED_ROWS
