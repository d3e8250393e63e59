"""record() counts what ran on every call: calls that differ in any way a call can differ
(non-tensor arguments, global state, data, torch modes, module state, dtypes) are each
counted as they ran, whatever order they come in, nested, in threads and in asyncio tasks.

The oracles: a hand count where one is short, FlopCounterMode for the matmul family, and
each call recorded alone (the sum of what ran).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass

import pytest
import sympy
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Recorder, record, typed_flops
from typedflops.cost.engine.recorder import torch_counts
from typedflops.cost.types import Cost

# -- functions whose calls can do different work with the same shapes ---------------------


@dataclass
class Config:
    reps: int


@typed_flops
def repeated(
    x: Float[Tensor, "n d"], w: Float[Tensor, "d d"], config: Config
) -> Float[Tensor, "n d"]:
    for _ in range(config.reps):
        x = x @ w
    return x


@typed_flops
def positives(x: Float[Tensor, " n"]) -> Float[Tensor, " m"]:
    return x[x > 0] * 2


@typed_flops
def attend(q: Float[Tensor, "b h s d"]) -> Float[Tensor, "b h s d"]:
    return F.scaled_dot_product_attention(q, q, q)


@typed_flops
def summed(x: Float[Tensor, "n m"]) -> Float[Tensor, ""]:
    return x.contiguous().sum()


SETTINGS = {"twice": False}


@typed_flops
def scaled(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    x = x * 3
    if SETTINGS["twice"]:
        x = x * 3
    return x


@typed_flops
def promoted(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "n d"]:
    return x * w[0] + 1


class Noisy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    @typed_flops
    def forward(self, x: Float[Tensor, "n 4"]) -> Float[Tensor, "n 4"]:
        out: Tensor = self.drop(self.proj(x))
        return out


X = torch.randn(6, 4)
W = torch.randn(4, 4)
W_GRAD = torch.randn(4, 4, requires_grad=True)
A = torch.randn(5, 3)
Q = torch.randn(1, 2, 4, 8)
NOISY = Noisy()


@contextmanager
def _setting(twice: bool) -> Iterator[None]:
    SETTINGS["twice"] = twice
    try:
        yield
    finally:
        SETTINGS["twice"] = False


@contextmanager
def _mode(module: nn.Module, training: bool) -> Iterator[None]:
    module.train(training)
    try:
        yield
    finally:
        module.train(True)


def _autocast() -> AbstractContextManager[object]:
    return torch.autocast("cpu", dtype=torch.bfloat16)


def _math() -> AbstractContextManager[object]:
    return sdpa_kernel(SDPBackend.MATH)


def _signs(positive: int) -> Tensor:
    return torch.tensor([1.0] * positive + [-1.0] * (8 - positive))


Call = Callable[[], object]


def _in(context: Callable[[], AbstractContextManager[object]], call: Call) -> Call:
    def run() -> object:
        with context():
            return call()

    return run


#: Calls keyed alike (same function, same shapes) that do different work, by the way
#: they differ; and calls that do the same work (a dropout mask drawn again).
KINDS: dict[str, list[Call]] = {
    "argument": [lambda r=r: repeated(X, W, Config(r)) for r in (1, 10, 3)],  # type: ignore[misc]
    "data": [lambda k=k: positives(_signs(k)) for k in (1, 4, 8, 0)],  # type: ignore[misc]
    "kernel": [lambda: attend(Q), _in(_math, lambda: attend(Q))],
    "autocast": [
        lambda: repeated(X, W, Config(1)),
        _in(_autocast, lambda: repeated(X, W, Config(1))),
    ],
    "layout": [lambda: summed(A), lambda: summed(A.t())],
    "global": [lambda: scaled(X), _in(lambda: _setting(True), lambda: scaled(X))],
    "module": [lambda: NOISY(X), _in(lambda: _mode(NOISY, False), lambda: NOISY(X))],
    "dtype": [lambda: promoted(X, W), lambda: promoted(X.double(), W)],
    "grad": [
        lambda: repeated(X, W_GRAD, Config(1)),
        _in(torch.no_grad, lambda: repeated(X, W_GRAD, Config(1))),
    ],
    "rng": [lambda: NOISY(X), lambda: NOISY(X)],
}
CALLS = [(kind, index) for kind, calls in KINDS.items() for index in range(len(calls))]


@dataclass(frozen=True)
class Ran:
    """What a record counted: the totals every Cost field holds, and FlopCounterMode's."""

    flops: int
    backward: int
    read: int
    written: int
    matmul: int
    torch_forward: int

    def __add__(self, other: Ran) -> Ran:
        return Ran(*(a + b for a, b in zip(self.astuple(), other.astuple(), strict=True)))

    def astuple(self) -> tuple[int, ...]:
        return (self.flops, self.backward, self.read, self.written, self.matmul, self.torch_forward)


ZERO = Ran(0, 0, 0, 0, 0, 0)


def _ran(rec: object, cost: Cost) -> Ran:
    forward, _ = torch_counts(rec.session.root)  # type: ignore[attr-defined]
    return Ran(
        cost.flops,
        cost.backward_flops,
        cost.bytes_read,
        cost.bytes_written,
        cost.matmul_flops,
        forward,
    )


_ALONE: dict[tuple[str, int], Ran] = {}


def alone(kind: str, index: int) -> Ran:
    """What one call runs, recorded by itself."""
    if (kind, index) not in _ALONE:
        with record() as rec:
            KINDS[kind][index]()
        _ALONE[(kind, index)] = _ran(rec, rec.total)
    return _ALONE[(kind, index)]


def keeps_spec(cost: Cost) -> None:
    """SPEC section 10: the formulas give the counts at the cost's dims, in its symbols."""
    dims = {sympy.Symbol(name): value for name, value in cost.dims.items()}
    assert cost.formula.xreplace(dims) == cost.flops
    assert cost.backward_formula.xreplace(dims) == cost.backward_flops
    assert cost.matmul_formula.xreplace(dims) == cost.matmul_flops
    for formula in (cost.formula, cost.backward_formula, cost.matmul_formula):
        assert {str(s) for s in formula.free_symbols} <= set(cost.dims)


# -- every call counted --------------------------------------------------------------------


def test_a_call_with_another_argument_is_counted_as_it_ran() -> None:
    with record() as rec:
        repeated(X, W, Config(1))
        repeated(X, W, Config(10))
    assert rec.total.flops == 11 * 2 * 6 * 4 * 4 == 2112
    assert [row.calls for row in rec.calls] == [1, 1]
    assert [row.cost().flops for row in rec.calls] == [192, 1920]
    for row in rec.calls:
        keeps_spec(row.cost())
        assert row.cost().exact  # each fitted at its own configuration


def test_data_dependent_shapes_are_counted_and_marked_inexact() -> None:
    with record() as rec:
        positives(_signs(1))
        positives(_signs(4))
    # a compare per element, a multiply per element kept
    assert [row.cost().flops for row in rec.calls] == [8 + 1, 8 + 4]
    assert rec.total.flops == 21
    assert not rec.total.exact and not any(row.cost().exact for row in rec.calls)
    keeps_spec(rec.total)
    assert "~" in rec.table()


def test_an_op_that_answers_a_bool_counts_its_comparisons() -> None:
    # torch.equal compares every element and returns a Python bool, no tensor
    a, b = torch.ones(5, 3), torch.ones(5, 3)
    with record() as rec:
        same = torch.equal(a, b)
    assert same
    assert rec.total.flops == 15
    assert rec.total.bytes_read == 2 * 15 * 4 and rec.total.bytes_written == 0


def test_an_op_our_rule_cannot_count_runs_and_is_named_uncounted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typedflops.cost.engine.rules import RuleEntry

    def cannot(*args: object, **kwargs: object) -> int:
        raise ValueError("a form of the op the rule does not know")

    monkeypatch.setattr(RuleEntry, "count", cannot)
    a, b = torch.ones(11, 17), torch.ones(11, 17)  # (sizes no other test records)
    with record() as rec:
        total = torch.add(a, b)
    assert torch.equal(total, torch.full((11, 17), 2.0))  # the user's work is untouched
    assert rec.total.flops == 0 and rec.total.uncounted == ("add",)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_calls_that_differ_are_each_counted(kind: str) -> None:
    calls = KINDS[kind]
    for order in (list(range(len(calls))), list(reversed(range(len(calls))))):
        with FlopCounterMode(display=False) as counter, record() as rec:
            for index in order:
                calls[index]()
        expected = sum((alone(kind, index) for index in order), ZERO)
        assert _ran(rec, rec.total) == expected
        assert expected.torch_forward == counter.get_total_flops()
        keeps_spec(rec.total)
        for row in rec.calls:
            keeps_spec(row.cost())


def test_each_difference_changes_what_ran() -> None:
    """The pairs above are not alike by accident: each changes a count, bytes or both."""
    for kind, calls in KINDS.items():
        found = {alone(kind, index) for index in range(len(calls))}
        assert len(found) == (1 if kind == "rng" else len(calls)), kind


def test_only_calls_that_did_the_same_work_share_a_row() -> None:
    with record() as rec:
        for _ in range(3):
            NOISY(X)
        with _mode(NOISY, False):
            NOISY(X)
    assert [row.calls for row in rec.calls] == [3, 1]
    assert [child.function for child in rec.calls[0].visible_children()] == []


# -- sequences, nested records --------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    calls=st.lists(st.sampled_from(CALLS), min_size=1, max_size=7),
    inner=st.tuples(st.integers(0, 7), st.integers(0, 7)),
)
def test_a_record_counts_the_sum_of_what_ran(
    calls: list[tuple[str, int]], inner: tuple[int, int]
) -> None:
    start, stop = sorted(inner)
    inner_rec: Recorder | None = None
    with FlopCounterMode(display=False) as counter, record() as outer:
        for position, (kind, index) in enumerate(calls):
            if position == start:
                nested = record()
                inner_rec = nested.__enter__()
            KINDS[kind][index]()
            if position == min(stop, len(calls) - 1) and position >= start:
                nested.__exit__(None, None, None)
    expected = sum((alone(kind, index) for kind, index in calls), ZERO)
    assert _ran(outer, outer.total) == expected
    assert expected.torch_forward == counter.get_total_flops()
    keeps_spec(outer.total)
    if inner_rec is not None:
        inside = calls[start : min(stop, len(calls) - 1) + 1]
        assert _ran(inner_rec, inner_rec.total) == sum(
            (alone(kind, index) for kind, index in inside), ZERO
        )


def test_nested_records_each_see_everything_inside_them() -> None:
    with FlopCounterMode(display=False) as outer_counter, record() as outer:
        repeated(X, W, Config(1))
        with FlopCounterMode(display=False) as inner_counter, record() as inner:
            repeated(X, W, Config(1))
    assert (outer.total.flops, inner.total.flops) == (384, 192)
    assert (outer_counter.get_total_flops(), inner_counter.get_total_flops()) == (384, 192)
    assert outer.calls[0].calls == 2


def test_records_closed_out_of_order_each_see_what_ran_while_they_were_open() -> None:
    with ExitStack() as stack:
        first = record()
        a = first.__enter__()
        repeated(X, W, Config(1))
        b = stack.enter_context(record())
        repeated(X, W, Config(1))
        first.__exit__(None, None, None)  # the outer one closes first
        repeated(X, W, Config(1))
        with record() as c:
            repeated(X, W, Config(1))
    repeated(X, W, Config(1))  # after every record: seen by none
    assert (a.total.flops, b.total.flops, c.total.flops) == (384, 576, 192)


@typed_flops
def outer_call(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "n d"]:
    with record() as inside:
        y = repeated(x, w, Config(2))
    assert inside.total.flops == 384
    return y @ w


def test_a_record_opened_inside_a_recorded_call_nests_in_it() -> None:
    with record() as rec:
        outer_call(X, W)
    (row,) = rec.calls
    assert row.cost().flops == 3 * 192
    assert [(child.function, child.calls) for child in row.visible_children()] == [("repeated", 1)]


def test_a_call_that_raises_is_counted_as_its_callers_ops() -> None:
    @typed_flops
    def fails(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "n d"]:
        x @ w
        raise ValueError("after one matmul")

    with record() as rec, pytest.raises(ValueError, match="after one matmul"):
        fails(X, W)
    assert rec.calls == [] and rec.total.flops == 192


# -- threads and tasks -----------------------------------------------------------------------


def test_asyncio_tasks_each_record_their_own_calls() -> None:
    async def task(calls: int) -> int:
        with record() as rec:
            for _ in range(calls):
                repeated(X, W, Config(1))
                await asyncio.sleep(0)
        return rec.total.flops

    async def main() -> tuple[list[int], int, int]:
        with record() as outer:
            repeated(X, W, Config(1))
            await asyncio.to_thread(repeated, X, W, Config(5))  # another thread's
            found = await asyncio.gather(*(task(1 + n % 3) for n in range(200)))
        return found, outer.total.flops, outer.total.matmul_flops

    found, outer, matmul = asyncio.run(main())
    assert found == [192 * (1 + n % 3) for n in range(200)]
    assert outer == matmul == 192 + sum(found)


def test_threads_each_record_their_own_calls() -> None:
    found: dict[int, int] = {}
    barrier = threading.Barrier(6)

    def work(calls: int) -> None:
        barrier.wait()
        with record() as rec:
            for _ in range(calls):
                repeated(X, W, Config(1))
        found[calls] = rec.total.flops

    with record() as main:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(1, 7)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert found == {n: 192 * n for n in range(1, 7)}
    assert main.total.flops == 0


# -- fields, and many rows ---------------------------------------------------------------


def test_matmul_flops_of_a_real_run_are_filled() -> None:
    layer = nn.Linear(16, 8)
    x = torch.randn(4, 16)
    with FlopCounterMode(display=False) as counter, record() as rec:
        torch.relu(layer(x)).sum()
    assert rec.total.matmul_flops == counter.get_total_flops() == 2 * 4 * 16 * 8
    assert rec.total.flops > rec.total.matmul_flops
    keeps_spec(rec.total)


def test_rows_of_many_shapes_share_one_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    from typedflops.cost.engine import recorder
    from typedflops.cost.engine.dryrun import Probe, measure

    fits: list[str] = []

    def counted(probe: Probe) -> Cost:
        fits.append(probe.function)
        return measure(probe)

    monkeypatch.setattr(recorder, "measure", counted)
    monkeypatch.setattr(recorder, "_FITS", type(recorder._FITS)())

    @typed_flops
    def fresh(x: Float[Tensor, "b d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "b k"]:
        return torch.relu(x @ w)

    w = torch.randn(4, 3)
    with record() as rec:
        for _ in range(3):
            for batch in range(1, 201):
                fresh(torch.randn(batch, 4), w)
    rows = rec.calls
    assert [(row.calls, row.dims["b"]) for row in rows] == [(3, b) for b in range(1, 201)]
    assert all(row.cost().exact and str(row.cost().formula) == "b*k*(2*d + 1)" for row in rows)
    assert fits == ["fresh"]
    total = rec.total
    assert total.flops == 3 * sum(b * 3 * 9 for b in range(1, 201))
    keeps_spec(total)
