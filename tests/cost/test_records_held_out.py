"""A record and an estimate leave the dispatch modes around them as they found them: the
dry runs that fit a row's formulas (run when the record's total is read, or by
``estimate()``) are typedflops' own, never work that ran, so a ``FlopCounterMode`` or any
other ``TorchDispatchMode`` open around them sees exactly the ops the program ran.

Hand counts: ``x @ w`` with ``x`` n x d and ``w`` d x d is one product of 2*n*d*d FLOPs
(P = 4,096 at 8x16); its backward for ``w`` alone (``x`` needs no gradient) is one more.
Each test uses sizes of its own: fits are shared between calls alike.
"""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record, typed_flops
from typedflops.text import format_count

P = 2 * 8 * 16 * 16


class _Seen(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Every aten op dispatched while it is open, by name."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: list[str] = []

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@typed_flops
def read_after_close(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "n d"]:
    """One product (n d)x(d d)."""
    return x @ w


@typed_flops
def read_inside(x: Float[Tensor, "b k"], w: Float[Tensor, "k k"]) -> Float[Tensor, "b k"]:
    """One product (b k)x(k k)."""
    return torch.mm(x, w)


@typed_flops
def estimated(x: Float[Tensor, "r c"], w: Float[Tensor, "c c"]) -> Float[Tensor, "r c"]:
    """One product (r c)x(c c)."""
    return torch.matmul(x, w)


@typed_flops
def seen(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, " n"]:
    """A product (n d)x(d d), a relu and a sum over d."""
    return torch.relu(x @ w).sum(-1)


def _plain(x: Tensor, w: Tensor) -> Tensor:
    return torch.relu(x @ w).sum(-1)


def test_reading_a_closed_records_total_adds_nothing_to_a_counter_around_it() -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        with record() as rec:
            y = read_after_close(x, w)
        total = rec.total
        assert counter.get_total_flops() == P
        y.sum().backward()  # (after the record closed: the counter's alone)
    assert counter.get_total_flops() == 2 * P
    assert (total.flops, total.matmul_flops) == (P, P)
    assert rec.rows()[0]["flops"] == P


def test_reading_an_open_records_total_adds_nothing_to_a_counter_around_it() -> None:
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    product = 2 * 4 * 8 * 8
    with FlopCounterMode(display=False) as counter, record() as rec:
        read_inside(x, w)
        assert rec.total.flops == product
        read_inside(x, w)
    assert counter.get_total_flops() == rec.total.flops == 2 * product
    assert [(row.function, row.calls) for row in rec.calls] == [("read_inside", 2)]


def test_an_estimate_adds_nothing_to_a_counter_around_it() -> None:
    with FlopCounterMode(display=False) as counter:
        cost = estimated.estimate(r=2, c=32)
    assert cost.flops == 2 * 2 * 32 * 32
    assert counter.get_total_flops() == 0


def test_a_dispatch_mode_around_a_record_sees_only_the_ops_that_ran() -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    leaf = w.clone().requires_grad_()
    with _Seen() as plain:
        for _ in range(2):
            _plain(x, leaf).sum().backward()
    w.requires_grad_()
    with _Seen() as around:
        with record() as rec:
            for _ in range(2):
                seen(x, w).sum().backward()
        assert rec.total.matmul_flops == 2 * P
        rec.table()
    assert around.ops == plain.ops
    assert around.ops.count("aten.mm.default") == 4  # (two forwards, two backwards for w)


class _Called(TorchFunctionMode):
    """Every torch function called while it is open, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


@typed_flops
def called(x: Float[Tensor, "m e"], w: Float[Tensor, "e e"]) -> Float[Tensor, "m e"]:
    """One product (m e)x(e e)."""
    return torch.matmul(x, w)


def test_a_function_mode_around_a_record_and_an_estimate_sees_only_the_calls_made() -> None:
    x, w = torch.randn(2, 4), torch.randn(4, 4)
    with _Called() as around:
        with record() as rec:
            called(x, w)
        assert rec.total.matmul_flops == 2 * 2 * 4 * 4
        called.estimate(m=3, e=5)
    assert around.calls.count("matmul") == 1
    assert rec.total.flops == 2 * 2 * 4 * 4


@typed_flops
def trained(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "n d"]:
    """One product (n d)x(d d)."""
    return x @ w


def test_a_records_table_shows_the_backward_that_ran_in_it() -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    with FlopCounterMode(display=False) as counter, record() as rec:
        y = trained(x, w)
        y.backward(torch.ones_like(y))  # (w's gradient alone: one product of P)
        z = trained(x, w.detach())  # (no backward: none predicted)
    assert counter.get_total_flops() == 3 * P
    assert (rec.total.flops, rec.total.backward_flops) == (2 * P, P)
    lines = rec.table().splitlines()
    header = lines[0].split()
    assert header[4:6] == ["FLOPs", "backward"]
    cells = {line.split()[0]: line.split() for line in lines[2:]}
    assert cells["total"][-4:-2] == [format_count(2 * P), format_count(P)]
    by_row = [
        (row["function"], row["calls"], row["flops"], row["backward_flops"]) for row in rec.rows()
    ]
    assert by_row == [("trained", 1, P, P), ("trained", 1, P, 0)]
    assert z.shape == (8, 16)
