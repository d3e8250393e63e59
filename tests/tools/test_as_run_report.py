"""Report rows for calls no dry run can cost: their calls counted as they ran.

``values_pkg`` has a function whose body reads a tensor's value (a dry run on meta tensors
has none): its report row gives the FLOPs counted while the calls ran ("as run"), and a
line under the table the bytes and why no formula exists, in words that are not an error.
A method of an operator holding its matrix in ``self`` is costed by dry runs that resize
only its argument: its formula is in ``k`` alone, ``m`` and ``n`` being the object's own
(the dry run of ``__init__`` works on a copy of the object, never on the caller's).
(tests/tools/test_mixed_hints_suite.py sends such a row through pytest-xdist workers.)

Counts by hand (float32, n, d, k as in the rows):
``normalised``: ``w.sum()`` d*k FLOPs, ``x @ w`` 2*n*d*k, the division n*k; bytes: the sum
reads 4*d*k and writes 4, ``float()`` reads those 4, the product reads 4*(n*d + d*k) and
writes 4*n*k, the division reads and writes 4*n*k.
``Dense.matmul``: 2*m*n*k FLOPs; reads 4*(m*n + n*k), writes 4*m*k.
"""

from __future__ import annotations

import pytest
import torch
from jaxtyping import Float
from plugin_args import PLUGIN_ARGS
from torch import Tensor

from typedflops import typed_flops
from typedflops.cost.engine.dryrun import measure
from typedflops.cost.engine.probes import call_probe
from typedflops.errors import DeviceError
from typedflops.tools.call_report import Record, merge, no_formula_reason, table

pytest_plugins = ["pytester"]

VALUES_PKG = '''
from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor


def normalised(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
    total = float(w.sum())
    return (x @ w) / total


def project(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
    return x @ w


class Dense:
    """An operator holding its matrix."""

    def __init__(self, matrix: Float[Tensor, "m n"]) -> None:
        self.matrix = matrix
        self.shape = matrix.shape
        self.dtype = matrix.dtype

    def matmul(self: Float[Dense, "m n"], rhs: Float[Tensor, "n k"]) -> Float[Tensor, "m k"]:
        return self.matrix @ rhs
'''

TESTS = """
import torch
import values_pkg


def test_normalised():
    values_pkg.normalised(torch.ones(3, 4), torch.ones(4, 2))
    values_pkg.project(torch.ones(3, 4), torch.ones(4, 2))


def test_operator():
    values_pkg.Dense(torch.ones(3, 4)).matmul(torch.ones(4, 2))
"""

# A function decorated in the test module (not by the hook): its calls are counted as
# they run from the call after the first test that could not cost it.
HAND_DECORATED = """
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import typed_flops


@typed_flops
def halved(x: Float[Tensor, "n"]) -> Float[Tensor, "n"]:
    return x / 2 if bool(x.sum() > 0) else x


def test_first():
    halved(torch.ones(4))


def test_later():
    halved(torch.ones(6))
"""

# The first call of a function the hook decorated is counted as it runs; once the dry
# run at the end of its test could not cost it, more are, up to 8 in all.
MANY = """
import torch
import values_pkg


def test_first():
    values_pkg.normalised(torch.ones(5, 4), torch.ones(4, 2))


def test_many():
    for _ in range(10):
        values_pkg.normalised(torch.ones(5, 4), torch.ones(4, 2))
"""

ARGS = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:randomly"]
READS = (
    "the body reads tensor values (a tensor's value (.item(), bool(), int(), an `if` on a "
    "tensor) at __init__.py:{line} ({code})), which a dry run on meta tensors does not have"
)
NORMALISED = READS.format(line=10, code="total = float(w.sum())")

EXPECTED = [
    "function        calls  dims           formula  FLOPs/call  FLOPs",
    "Dense.__init__      1  m=3, n=4       0                 0      0",
    "Dense.matmul        1  m=3, n=4, k=2  24*k             48     48",  # 2*m*n*k
    "normalised          1  n=3, d=4, k=2  as run           62     62",
    "project             1  n=3, d=4, k=2  2*d*k*n          48     48",
    # 8 + 48 + 6 = 62 FLOPs; 36 + 4 + 104 + 48 = 192 bytes
    "as run normalised(n=3, d=4, k=2): 62 FLOPs, 192 bytes per call, counted while the call "
    f"ran; no formula, as {NORMALISED}",
]


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.mkpydir("values_pkg").joinpath("__init__.py").write_text(VALUES_PKG)
    pytester.makepyfile(test_values=TESTS)
    pytester.makeini("[pytest]\npythonpath = .\n")
    return pytester


def _report(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if " typedflops report " in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] in "=_"), len(lines))
    return [line.rstrip() for line in lines[start + 1 : end] if not line.startswith("---")]


def test_calls_no_dry_run_can_cost_are_counted_as_they_ran(project: pytest.Pytester) -> None:
    result = project.runpytest(
        *ARGS, *PLUGIN_ARGS, "--typedflops=values_pkg", "--typedflops-report"
    )
    result.assert_outcomes(passed=2)
    assert _report(result.outlines) == EXPECTED
    assert "?" not in "\n".join(EXPECTED)


def test_a_few_calls_are_counted_and_the_rest_taken_at_their_mean(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(test_values=MANY, test_hand=HAND_DECORATED)
    result = project.runpytest(
        *ARGS, *PLUGIN_ARGS, "-p", "no:xdist", "--typedflops=values_pkg", "--typedflops-report"
    )
    result.assert_outcomes(passed=4)
    halved = READS.format(line=10, code="return x / 2 if bool(x.sum() > 0) else x")
    halved = halved.replace("__init__.py", "test_hand.py")
    assert _report(result.outlines) == [
        "function    calls  dims           formula           FLOPs/call    FLOPs",
        # the first call ran before any dry run said it could not cost it
        "halved          1  n=4            ?                          ?        ?",
        "                1  n=6            as run                    13       13",
        # 8 calls counted as they ran (MEASURED_CALLS), 11 made: 98 * 11
        "normalised     11  n=5, d=4, k=2  as run (8 of 11)          98  ~ 1.08k",
        "? halved(n=4): not costed: " + halved + "; the call itself ran and passed its checks",
        # 6 (sum) + 1 (compare) + 6 (division) FLOPs; 28 + 5 + 1 + 48 bytes
        "as run halved(n=6): 13 FLOPs, 82 bytes per call, counted while the call ran; "
        f"no formula, as {halved}",
        # 8 + 80 + 10 FLOPs; 36 + 4 + 4*(20 + 8 + 10) + 80 bytes
        "as run normalised(n=5, d=4, k=2): 98 FLOPs, 272 bytes per call, counted while "
        f"8 calls ran; no formula, as {NORMALISED}",
        "as run (k of n): FLOPs over the n calls taken at the mean of the k counted",
    ]


def _record(calls: int, as_run: list[list[int]], uncounted: tuple[str, ...] = ()) -> Record:
    return Record(
        module="m",
        name="f",
        line=1,
        binding=[("n", 4)],
        calls=calls,
        formula=None,
        flops=0,
        exact=True,
        uncounted=list(uncounted),
        assumed=[],
        why="the body reads tensor values",
        as_run=as_run,
    )


def test_workers_counts_add_up_and_a_spread_is_shown() -> None:
    first = _record(3, [[10, 40], [10, 40]])
    second = _record(2, [[30, 80]], uncounted=("linalg_cholesky_ex",))
    merged = merge([[first], [second]])
    assert [m["calls"] for m in merged] == [5]
    assert first["as_run"] == [[10, 40], [10, 40]]  # (the workers' records stay as sent)
    assert table(merged) == [
        "function  calls  dims  formula          FLOPs/call  FLOPs",
        "--------  -----  ----  ---------------  ----------  -----",
        "f             5  n=4   as run (3 of 5)       10-30   ~ 83",
        "as run f(n=4): 10-30 FLOPs, 40-80 bytes per call, counted while 3 calls ran; no "
        "formula, as the body reads tensor values",
        # ops that ran without a FLOP rule are named, as for a costed row
        "uncounted ops (ran, no FLOP rule): linalg_cholesky_ex",
        "as run (k of n): FLOPs over the n calls taken at the mean of the k counted",
    ]


@typed_flops
def _mm(a: Float[Tensor, "m k"], b: Float[Tensor, "k n"]) -> Float[Tensor, "m n"]:
    return a @ b


class _Factored:
    """Holds a real tensor a dry run's copy of it keeps (not a module: nothing to swap)."""

    def __init__(self, a: Tensor) -> None:
        self.a = a

    @typed_flops
    def apply(self, x: Float[Tensor, "k n"]) -> Float[Tensor, "k n"]:
        return _mm(self.a, x)


def test_a_dry_run_meeting_real_tensors_held_in_self_counts_on_their_meta_copies() -> None:
    # (it stopped with a DeviceError at _mm: a real `self.a` beside a meta `x`)
    factored, x = _Factored(torch.ones(3, 3)), torch.ones(3, 2)
    factored.apply(x)
    cost = measure(call_probe(_Factored.apply, (factored, x), {}, {"k": 3, "n": 2}))
    assert cost.flops == 2 * 3 * 3 * 2
    assert str(cost.formula) == "18*n" and cost.exact  # (k is held: `self.a` fixes it)
    assert cost.fixed == {"k": 3}


def test_a_dry_run_meeting_tensors_on_another_device_says_so() -> None:
    reason = no_formula_reason(DeviceError("_mm(): argument 'b' is on meta but 'a' is on cuda"))
    assert reason == (
        "a dry run runs on meta tensors, and this call meets tensors on another device that "
        "it cannot replace: _mm(): argument 'b' is on meta but 'a' is on cuda"
    )


LOSS_PKG = """
from __future__ import annotations

import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor


def loss(logits: Float[Tensor, "n c"], targets: Int[Tensor, "n"]) -> Float[Tensor, ""]:
    return F.cross_entropy(logits, targets)
"""

LOSS_TESTS = """
import torch
import loss_pkg


def test_loss():
    loss_pkg.loss(torch.randn(4, 3), torch.tensor([0, 2, -100, 1]))
"""


def test_the_report_says_what_a_dry_run_took_as_given(pytester: pytest.Pytester) -> None:
    # A dry run has no targets' values: it counts every target, as if none were ignored,
    # and the report says so under the table, as the Cost does.
    pytester.mkpydir("loss_pkg").joinpath("__init__.py").write_text(LOSS_PKG)
    pytester.makepyfile(test_loss=LOSS_TESTS)
    pytester.makeini("[pytest]\npythonpath = .\n")
    result = pytester.runpytest(
        *ARGS, *PLUGIN_ARGS, "-p", "no:xdist", "--typedflops=loss_pkg", "--typedflops-report"
    )
    result.assert_outcomes(passed=1)
    assert _report(result.outlines)[-1:] == [
        "values not known: nll_loss: every target counted, as if none equals ignore_index"
    ]


def test_workers_records_keep_what_each_took_as_given() -> None:
    first, second = _record(1, []), _record(2, [])
    first["assumed"], second["assumed"] = ["a"], ["b", "a"]
    (merged,) = merge([[first], [second]])
    assert merged["assumed"] == ["a", "b"]
