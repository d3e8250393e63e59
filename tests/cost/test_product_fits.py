"""Sizes that are neither a monomial nor affine in the dims are fitted as a product of one
factor per dim (a multi-query projection's ``d + 2*d/n_head``, ``F.pdist``'s
``n*(n - 1)/2`` pairs, ``triu_indices``' ``n*(n + 1)/2``), from more runs made only where
the simple forms fit no formula, and marked exact only where runs not used to fit them
agree. Each formula is checked against real runs at other sizes (FlopCounterMode for the
matrix products, ``record()`` for what else ran)."""

from __future__ import annotations

import dataclasses

import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Cost, record, typed_flops
from typedflops.cost.engine import dryrun

SLOW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])

batch, seq, d, n, n_head = sympy.symbols("batch seq d n n_head")


@dataclasses.dataclass
class Config:
    hidden: int = 64
    n_head: int = 4


class MultiQuery(nn.Module):
    """Falcon's fused projection: the queries of every head, one key and one value head.

    ``x``: (batch, seq, hidden) -> (batch, seq, hidden + 2 * hidden // n_head)."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        if config.hidden % config.n_head:
            raise ValueError("hidden must be a multiple of n_head")
        self.config = config
        head_dim = config.hidden // config.n_head
        self.qkv = nn.Linear(config.hidden, config.hidden + 2 * head_dim)

    @typed_flops
    def forward(self, x: Float[Tensor, "batch seq d"]) -> Float[Tensor, "batch seq e"]:
        out: Tensor = self.qkv(x)
        return out


def _matmul_flops(module: nn.Module, x: Tensor) -> int:
    with FlopCounterMode(display=False) as counter:
        module(x)
    count: int = counter.get_total_flops()
    return count


def test_a_multi_query_projection_is_fitted_in_both_sizes() -> None:
    cost = MultiQuery.forward.estimate(MultiQuery(Config()), batch=2, seq=8, d=64)
    # the weight's width: hidden queries and two heads of hidden / n_head
    assert sympy.simplify(cost.formula - 2 * batch * seq * d * (d + 2 * d / n_head)) == 0
    assert cost.forward.exact and cost.matmul.exact and cost.backward.exact
    assert cost.flops == 2 * 2 * 8 * 64 * 96
    for hidden, heads, b, s in [(48, 3, 3, 5), (96, 8, 1, 7), (40, 2, 2, 3), (64, 64, 1, 2)]:
        module = MultiQuery(Config(hidden, heads))
        sizes = {**cost.dims, "batch": b, "seq": s, "d": hidden, "n_head": heads}
        truth = _matmul_flops(module, torch.randn(b, s, hidden))
        assert cost.forward.at(sizes) == truth
        assert cost.matmul.at(sizes) == truth


def _pairs(x: Float[Tensor, "n d"]) -> Float[Tensor, " p"]:
    return nn.functional.pdist(x)


pairs = typed_flops(_pairs)


def _recorded(function: object, *args: Tensor) -> int:
    with record() as rec:
        function(*args)  # type: ignore[operator]
    count: int = rec.total.flops
    return count


def test_pdist_is_fitted_over_its_pairs() -> None:
    cost = pairs.estimate(n=10, d=4)
    # per pair, 4 per coordinate (subtract, abs, square, add) and a root
    assert sympy.expand(cost.formula - n * (n - 1) / 2 * (4 * d + 1)) == 0
    assert cost.exact
    for rows, width in [(2, 1), (5, 3), (13, 7)]:
        truth = _recorded(pairs, torch.randn(rows, width))
        assert truth == rows * (rows - 1) // 2 * (4 * width + 1)
        assert cost.forward.at({"n": rows, "d": width}) == truth


@typed_flops
def upper_products(x: Float[Tensor, "n d"]) -> Float[Tensor, " p"]:
    rows, cols = torch.triu_indices(x.shape[0], x.shape[0], device=x.device)
    return (x[rows] * x[cols]).sum(-1)


def test_a_triangle_of_pairs_is_fitted() -> None:
    cost = upper_products.estimate(n=10, d=4)
    # n*(n + 1)/2 pairs, each d multiplies and d adds
    assert sympy.expand(cost.formula - n * (n + 1) * d) == 0
    assert cost.exact
    for rows, width in [(3, 2), (7, 5)]:
        truth = _recorded(upper_products, torch.randn(rows, width))
        assert cost.forward.at({"n": rows, "d": width}) == truth


def _holds_where_it_says(cost: Cost, function: object, rows: int, width: int) -> None:
    for term in cost.terms.values():
        assert term.holds_at(cost.dims)
    truth = _recorded(function, torch.randn(rows, width))
    if cost.forward.exact:
        assert cost.forward.at({"n": rows, "d": width}) == truth


@SLOW
@given(rows=st.sampled_from([2, 3, 4, 5, 8]), width=st.sampled_from([1, 2, 3, 8]))
def test_small_and_equal_sizes_make_no_false_fit(rows: int, width: int) -> None:
    for function in (pairs, upper_products):
        cost = function.estimate(n=rows, d=width)
        for other_rows, other_width in [(rows + 5, width + 2), (3 * rows, 1)]:
            _holds_where_it_says(cost, function, other_rows, other_width)


class Floored(nn.Module):
    """``hidden // n_head`` with no check that it divides: a formula in ``hidden / n_head``
    is wrong wherever it does not."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.qkv = nn.Linear(config.hidden, config.hidden + 2 * (config.hidden // config.n_head))

    @typed_flops
    def forward(self, x: Float[Tensor, "batch seq d"]) -> Float[Tensor, "batch seq e"]:
        out: Tensor = self.qkv(x)
        return out


@pytest.mark.parametrize(("hidden", "heads"), [(64, 4), (60, 6), (12, 5)])
def test_a_floored_width_is_never_exact_and_wrong(hidden: int, heads: int) -> None:
    cost = Floored.forward.estimate(Floored(Config(hidden, heads)), batch=2, seq=3, d=hidden)
    assert cost.forward.holds_at(cost.dims)
    for other_hidden, other_heads in [(64, 5), (30, 4), (7 * hidden, heads)]:
        module = Floored(Config(other_hidden, other_heads))
        truth = _matmul_flops(module, torch.randn(2, 3, other_hidden))
        sizes = {**cost.dims, "d": other_hidden, "n_head": other_heads}
        if cost.forward.exact and {"d", "n_head"} <= {str(s) for s in cost.formula.free_symbols}:
            assert cost.forward.at(sizes) == truth, (other_hidden, other_heads)


@dataclasses.dataclass
class Sizes:
    dim: int = 96
    multiple_of: int = 32


class Rounded(nn.Module):
    """LLaMA's feed-forward width: ``8 * dim / 3`` rounded up to a multiple of ``multiple_of``."""

    def __init__(self, config: Sizes) -> None:
        super().__init__()
        hidden = int(2 * 4 * config.dim / 3)
        m = config.multiple_of
        hidden = m * ((hidden + m - 1) // m)
        self.config = config
        self.up = nn.Linear(config.dim, hidden, bias=False)
        self.down = nn.Linear(hidden, config.dim, bias=False)

    @typed_flops
    def forward(self, x: Float[Tensor, "batch dim"]) -> Float[Tensor, "batch dim"]:
        out: Tensor = self.down(self.up(x))
        return out


@SLOW
@given(dim=st.sampled_from([12, 48, 96, 100, 384]), m=st.sampled_from([4, 16, 32, 256]))
def test_a_rounded_width_is_never_exact_and_wrong(dim: int, m: int) -> None:
    cost = Rounded.forward.estimate(Rounded(Sizes(dim, m)), batch=2, dim=dim)
    names = {str(s) for s in cost.formula.free_symbols}
    for other_dim, other_m in [(dim + 7, m), (dim, 2 * m + 8), (5 * dim + 1, m + 1)]:
        module = Rounded(Sizes(other_dim, other_m))
        truth = _matmul_flops(module, torch.randn(2, other_dim))
        sizes = {**cost.dims, "dim": other_dim, "multiple_of": other_m}
        changed = {"dim"} | ({"multiple_of"} if other_m != m else set())
        if cost.forward.exact and changed <= names:  # (a size held fixed is a number)
            assert cost.forward.at(sizes) == truth, (other_dim, other_m)


class Plain(nn.Module):
    """A linear layer: its sizes are monomials in the dims."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.proj = nn.Linear(width, 2 * width)

    @typed_flops
    def forward(self, x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch e"]:
        out: Tensor = self.proj(x)
        return out


def test_sizes_the_simple_forms_fit_take_no_more_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object) -> None:
        raise AssertionError("more runs made for sizes the simple forms fit")

    monkeypatch.setattr(dryrun, "fitted_further", refused)
    cost = Plain.forward.estimate(Plain(8), batch=4, d=8)
    assert cost.exact
    assert sympy.expand(cost.formula - 4 * batch * d**2) == 0


@dataclasses.dataclass
class Heads:
    hidden: int = 64
    n_head: int = 8
    n_kv_head: int = 2


class GroupedQuery(nn.Module):
    """A fused projection for grouped-query attention: ``n_head`` query heads and
    ``n_kv_head`` key and value heads of ``hidden // n_head``.

    ``x``: (batch, seq, hidden) -> (batch, seq, hidden + 2 * n_kv_head * head_dim)."""

    def __init__(self, config: Heads) -> None:
        super().__init__()
        if config.hidden % config.n_head or config.n_head % config.n_kv_head:
            raise ValueError("n_kv_head must divide n_head, and n_head hidden")
        self.config = config
        head_dim = config.hidden // config.n_head
        self.qkv = nn.Linear(config.hidden, config.hidden + 2 * config.n_kv_head * head_dim)

    @typed_flops
    def forward(self, x: Float[Tensor, "batch seq d"]) -> Float[Tensor, "batch seq e"]:
        out: Tensor = self.qkv(x)
        return out


OTHER_HEADS = [(48, 6, 2), (64, 8, 8), (96, 4, 1), (32, 2, 1), (40, 10, 5)]


def test_a_grouped_query_projection_is_fitted_in_its_three_sizes() -> None:
    cost = GroupedQuery.forward.estimate(GroupedQuery(Heads()), batch=2, seq=8, d=64)
    n_kv = sympy.Symbol("n_kv_head")
    truth = 2 * batch * seq * d * (d + 2 * n_kv * d / n_head)
    assert sympy.simplify(cost.formula - truth) == 0
    assert cost.exact
    for hidden, heads, kv in OTHER_HEADS:
        module = GroupedQuery(Heads(hidden, heads, kv))
        sizes = {**cost.dims, "d": hidden, "n_head": heads, "n_kv_head": kv, "batch": 3}
        assert cost.forward.at(sizes) == _matmul_flops(module, torch.randn(3, 8, hidden))


@SLOW
@given(heads=st.sampled_from([(64, 8, 2), (64, 4, 4), (32, 4, 1), (16, 2, 2), (24, 3, 1)]))
def test_grouped_query_sizes_that_coincide_make_no_false_fit(
    heads: tuple[int, int, int],
) -> None:
    hidden, n_heads, kv = heads
    cost = GroupedQuery.forward.estimate(
        GroupedQuery(Heads(hidden, n_heads, kv)), batch=2, seq=3, d=hidden
    )
    assert cost.forward.holds_at(cost.dims)
    names = {str(s) for s in cost.formula.free_symbols}
    for other in OTHER_HEADS:
        changed = {
            name
            for name, value, own in zip(("d", "n_head", "n_kv_head"), other, heads, strict=True)
            if value != own
        }
        if cost.forward.exact and changed <= names:
            module = GroupedQuery(Heads(*other))
            sizes = {**cost.dims, "d": other[0], "n_head": other[1], "n_kv_head": other[2]}
            truth = _matmul_flops(module, torch.randn(2, 3, other[0]))
            assert cost.forward.at(sizes) == truth, other


@typed_flops
def patches_squared(x: Float[Tensor, "b c h w"]) -> Tensor:
    patches = nn.functional.unfold(x, 3)  # (b, c*9, (h - 2)*(w - 2))
    return patches * patches


def test_positions_of_a_valid_window_are_a_product_of_affine_factors() -> None:
    cost = patches_squared.estimate(b=2, c=3, h=8, w=10)
    b, c, h, w = sympy.symbols("b c h w")
    # a multiply per value: c*9 values at each of (h - 2)*(w - 2) positions
    assert sympy.expand(cost.formula - 9 * b * c * (h - 2) * (w - 2)) == 0
    assert cost.exact
    for sizes in [(1, 2, 3, 3), (3, 1, 11, 5), (2, 4, 20, 17)]:
        truth = _recorded(patches_squared, torch.randn(*sizes))
        assert cost.forward.at(dict(zip("bchw", sizes, strict=True))) == truth
