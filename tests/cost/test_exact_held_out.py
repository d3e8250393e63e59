"""Formulas marked exact, checked where no fit looked: every term and every per-op row of a
Cost marked exact gives, at other values of each symbol (a module's own sizes rebuilt),
the count of that row in a dry run there, and each total the count of a real run
(``record()``, forward and backward). Bodies whose ops change with a size (a loop over
it, a mask buffer sliced at the input's length) fit their rows with that size held at
its value: those rows name it as a number and are marked inexact."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import Cost, record, typed_flops

SLOW = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_true_at_own_sizes(cost: Cost) -> None:
    for name, term in cost.terms.items():
        assert term.holds_at(cost.dims), (name, term, cost.dims)
    for row in cost.ops:
        assert row.forward.holds_at(cost.dims), (row.op, row.forward, cost.dims)
        assert row.backward.holds_at(cost.dims), (row.op, row.backward, cost.dims)


def assert_rows_hold(cost: Cost, again: Cost, changed: Mapping[str, int]) -> None:
    """Each row of ``cost`` marked exact is, at ``changed`` sizes, the same op as the row
    in its place in ``again`` (a dry run there) with its counts; a row of no FLOPs, an op
    each of whose calls there costs none."""
    values = {**cost.dims, **changed}
    for index, row in enumerate(cost.ops):
        for side in ("forward", "backward"):
            term = getattr(row, side)
            if not term.exact:
                continue
            if term.formula == 0:  # (free at any size: so is each such op there)
                same = [getattr(r, side).count for r in again.ops if r.op == row.op]
                assert same and not any(same), (row.op, side, same, changed)
                continue
            assert index < len(again.ops), (index, row.op, changed)
            there = again.ops[index]
            assert there.op == row.op, (index, row.op, there.op, changed)
            assert term.at(values) == getattr(there, side).count, (
                index,
                row.op,
                side,
                term.formula,
                changed,
            )


def assert_totals_hold(cost: Cost, ran: Cost, changed: Mapping[str, int]) -> None:
    """Each total of ``cost`` marked exact gives, at ``changed`` sizes, what ran there."""
    values = {**cost.dims, **changed}
    if cost.forward.exact:
        assert cost.forward.at(values) == ran.flops, (cost.formula, changed, ran.flops)
    if cost.backward.exact:
        assert cost.backward.at(values) == ran.backward_flops, (cost.backward_formula, changed)


def ran(call: Callable[[Tensor], Tensor], shape: tuple[int, ...]) -> Cost:
    """The record of a real run of ``call`` on a random input of ``shape``, with backward."""
    x = torch.randn(*shape, requires_grad=True)
    with record() as rec:
        out = call(x)
        out.backward(torch.ones_like(out))
    return rec.total


@typed_flops
def doubled_then_scaled(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    for _ in range(x.shape[0]):
        x = x * 2
    return x.sum(0, keepdim=True) * x


def test_rows_of_a_loop_over_a_size_are_not_exact_at_its_value() -> None:
    # Each ``x * 2`` costs n*d; at n=4, d=3 the rows read 4*d (n held at 4).
    cost = doubled_then_scaled.estimate(n=4, d=3, grad=("x",))
    assert cost.exact
    assert_true_at_own_sizes(cost)
    rows = [row for row in cost.ops if row.op == "mul"]
    assert len(rows) == 5 and all(row.flops == 12 for row in rows)
    assert not any(row.forward.exact for row in rows)
    assert "~ 4*d" in str(cost)
    again = doubled_then_scaled.estimate(n=6, d=3, grad=("x",))
    assert again.ops[0].flops == 18  # one n*d multiply at n=6, not 4*d
    assert_rows_hold(cost, again, {"n": 6})


@SLOW
@given(
    n=st.integers(1, 9),
    d=st.integers(1, 5),
    others=st.lists(st.integers(1, 13), min_size=3, max_size=3, unique=True),
)
def test_a_loop_over_a_size_holds_where_marked_exact(n: int, d: int, others: list[int]) -> None:
    cost = doubled_then_scaled.estimate(n=n, d=d, grad=("x",))
    assert_true_at_own_sizes(cost)
    for other in others:
        for changed in ({"n": other}, {"d": other}, {"n": other, "d": other + 1}):
            sizes: dict[str, Any] = {**cost.dims, **changed}
            again = doubled_then_scaled.estimate(**sizes, grad=("x",))
            assert_rows_hold(cost, again, changed)
            assert_totals_hold(cost, ran(doubled_then_scaled, (sizes["n"], sizes["d"])), changed)


class MaskedAttention(nn.Module):
    """Causal self-attention over a mask buffer of ``max_len`` positions, sliced at the
    input's length: x (b, s, d_model) -> (b, s, d_model), s <= max_len."""

    def __init__(self, d_model: int, n_heads: int, max_len: int) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.max_len = d_model, n_heads, max_len
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.register_buffer("mask", torch.tril(torch.ones(max_len, max_len)).bool())

    @typed_flops
    def forward(self, x: Float[Tensor, "b s d"]) -> Float[Tensor, "b s d"]:
        b, s, d = x.shape
        q, k, v = (
            part.view(b, s, self.n_heads, -1).transpose(1, 2) for part in self.qkv(x).split(d, -1)
        )
        att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        mask = self.get_buffer("mask")
        att = att.masked_fill(~mask[:s, :s], float("-inf")).softmax(-1)
        y: Tensor = self.out((att @ v).transpose(1, 2).reshape(b, s, d))
        return y


def _attention_cost(sizes: Mapping[str, Any]) -> Cost:
    model = MaskedAttention(sizes["d"], sizes["n_heads"], sizes["max_len"])
    cost: Cost = MaskedAttention.forward.estimate(
        model, b=sizes["b"], s=sizes["s"], d=sizes["d"], grad=("x",)
    )
    return cost


def test_rows_of_a_sliced_mask_body_name_the_length_or_are_not_exact() -> None:
    # At s=8 the first projection costs 6*b*s*d**2 = 55,296; its row read 48*b*d**2,
    # which gives 55,296 at s=5 too, where 34,560 ran.
    base = {"b": 2, "s": 8, "d": 24, "n_heads": 3, "max_len": 16}
    cost = _attention_cost(base)
    assert_true_at_own_sizes(cost)
    first = cost.ops[0]
    assert (first.op, first.flops) == ("linear", 6 * 2 * 8 * 24 * 24)
    assert first.forward.exact is False or "s" in {str(s) for s in first.formula.free_symbols}
    for changed in ({"s": 5}, {"s": 12}, {"b": 3}, {"d": 12}, {"n_heads": 6}, {"max_len": 40}):
        sizes = {**base, **changed}
        assert_rows_hold(cost, _attention_cost(sizes), changed)
        model = MaskedAttention(sizes["d"], sizes["n_heads"], sizes["max_len"])
        assert_totals_hold(cost, ran(model, (sizes["b"], sizes["s"], sizes["d"])), changed)


@typed_flops
def centred(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
    y = x @ w
    if x.shape[0] > 1:
        y = y - y.mean(0)
    return y * 2


def test_rows_at_a_dim_of_one_fitted_from_two_up_are_not_exact_at_one() -> None:
    # At n=1 (no centring) the product's row read 2*d*k, exact: 240 ran at n=6, not 40.
    cost = centred.estimate(n=1, d=4, k=5, grad=("x", "w"))
    assert_true_at_own_sizes(cost)
    assert [(row.op, row.flops) for row in cost.ops] == [("matmul", 40), ("mul", 5)]
    for n in (2, 3, 6):
        assert_rows_hold(cost, centred.estimate(n=n, d=4, k=5, grad=("x", "w")), {"n": n})
        x, w = torch.randn(n, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)
        with record() as rec:
            out = centred(x, w)
            out.backward(torch.ones_like(out))
        assert_totals_hold(cost, rec.total, {"n": n})
