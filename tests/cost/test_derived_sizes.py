"""Sizes a constructor derives from its own (``head_dim = d // n_head``) in formulas: the
module is rebuilt far from its sizes to check them, and where that makes a derived size 1
(``n_head`` at ``d``: heads of width 1, whose products torch runs as multiplies) the run
refutes nothing, as a summed dim of 1 keeps a product's formula; a nearer value checks
instead. Every formula marked exact is checked against real runs of the module rebuilt at
other sizes (``record()`` around forward and backward)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Cost, Term, record, typed_flops
from typedflops.cost.engine.dryrun import _held_at_own_sizes
from typedflops.cost.types import above_one

SLOW = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])

b, n, d, n_head = sympy.symbols("b n d n_head")


@dataclasses.dataclass
class Config:
    d: int = 64
    n_head: int = 4


@dataclasses.dataclass
class Thresholded(Config):
    threshold: int = 10_000


class Attention(nn.Module):
    """Causal self-attention written out (no fused kernel): heads of ``d // n_head``, a
    scale read from the keys' width, positions from ``torch.arange``.

    ``x``: (b, n, d) -> (b, n, d)."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        if config.d % config.n_head:
            raise ValueError("n_head must divide d")
        self.config = config
        self.n_head = config.n_head
        self.head_dim = config.d // config.n_head
        self.qkv = nn.Linear(config.d, 3 * config.d)
        self.out = nn.Linear(config.d, config.d)

    @typed_flops
    def forward(self, x: Float[Tensor, "b n d"]) -> Float[Tensor, "b n d"]:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=-1)
        q, k, v = (
            t.view(batch, seq, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v)
        )
        scores = (q @ k.transpose(-2, -1)) / (k.shape[-1] ** 0.5)
        position = torch.arange(seq, device=x.device)
        scores = scores.masked_fill(position[None, :] > position[:, None], float("-inf"))
        y = self.scaled(scores.softmax(-1) @ v)
        out: Tensor = self.out(y.transpose(1, 2).reshape(batch, seq, width))
        return out

    def scaled(self, y: Tensor) -> Tensor:
        return y


class Branching(Attention):
    """An extra scaling past ``threshold`` heads."""

    def __init__(self, config: Thresholded) -> None:
        super().__init__(config)
        self.threshold = config.threshold

    def scaled(self, y: Tensor) -> Tensor:
        return y * 2 if self.n_head > self.threshold else y


def _ran(config: Config, batch: int, seq: int) -> dict[str, int]:
    """What a real forward and backward of the module at ``config`` ran (the backward of
    the loss, a sum, costs nothing: its gradient is a broadcast of ones)."""
    module = Branching(config) if isinstance(config, Thresholded) else Attention(config)
    x = torch.randn(batch, seq, config.d)
    with record() as rec:
        y = module(x)
    with record() as back:
        y.sum().backward()
    return {"forward": rec.total.flops, "backward": back.total.backward_flops}


def _exact_terms_hold(cost: Cost, config: Config, batch: int, seq: int) -> None:
    ran = _ran(config, batch, seq)
    values = {**cost.dims, "b": batch, "n": seq, "d": config.d, "n_head": config.n_head}
    for name in ("forward", "backward"):
        term = cost.terms[name]
        if term.exact:
            assert term.at(values) == ran[name], (name, config, batch, seq)


def test_attention_written_out_is_exact_in_its_heads() -> None:
    cost = Attention.forward.estimate(Attention(Config()), b=2, n=12, d=64)
    # the projections 2*b*n*d*(3*d + d); scores and their products with v 2*b*n*n*d each;
    # the scale's divide and the softmax's 5 per score, b*n_head*n*n scores
    truth = 8 * b * n * d**2 + 4 * b * n**2 * d + 6 * b * n**2 * n_head
    assert sympy.expand(above_one(cost.formula) - truth) == 0
    # several heads of width 1: the merge is a view, and the output projection adds its
    # bias apart (F.linear fuses it into addmm, uncounted, for a contiguous input only)
    for heads in (1, 2, 16):
        part = (cost.formula - truth).xreplace({d: heads, n_head: heads})
        # (but for one position: (b, h, 1, 1) -> (b, 1, h) is contiguous, the bias fused)
        apart = b * n * heads * int(heads > 1) * (1 - sympy.KroneckerDelta(1, n))
        assert sympy.expand(part - apart) == 0, (heads, part)
    assert cost.forward.exact and cost.backward.exact
    for config, batch, seq in [
        (Config(16, 16), 2, 3),
        (Config(16, 16), 2, 1),
        (Config(16, 16), 1, 1),
        (Config(96, 8), 3, 20),
        (Config(48, 3), 1, 31),
        (Config(32, 2), 2, 9),
    ]:
        _exact_terms_hold(cost, config, batch, seq)


@SLOW
@given(
    heads=st.sampled_from([(64, 4), (32, 8), (128, 2), (48, 6)]),
    threshold=st.sampled_from([2, 5, 16, 40, 10_000]),
)
def test_a_branch_on_the_heads_is_never_exact_and_wrong(
    heads: tuple[int, int], threshold: int
) -> None:
    width, count = heads
    module = Branching(Thresholded(width, count, threshold))
    cost = Branching.forward.estimate(module, b=2, n=5, d=width)
    for term in cost.terms.values():
        assert term.holds_at(cost.dims)
    for other_width, other_count in [
        (width, 2 * count),
        (2 * width, count),
        (96, 3),
        (96, 12),
        (count, count),  # (heads of width 1)
    ]:
        _exact_terms_hold(cost, Thresholded(other_width, other_count, threshold), 2, 5)


@pytest.mark.parametrize("heads", [4, 16])
def test_heads_of_width_one_are_counted_as_they_ran(heads: int) -> None:
    # the call's own count is what ran, heads of width 1 included
    cost = Attention.forward.estimate(Attention(Config(16, heads)), b=2, n=3, d=16)
    ran = _ran(Config(16, heads), 2, 3)
    assert cost.flops == ran["forward"]
    assert cost.backward_flops == ran["backward"]


@dataclasses.dataclass
class Widths:
    h: int = 64
    k: int = 1


def _widened(width: Callable[[int, int], int]) -> Any:
    class Widened(nn.Module):
        """A projection to a width the constructor derives from ``h`` and ``k`` with ``//``.

        ``x``: (b, h) -> (b, e)."""

        def __init__(self, config: Widths) -> None:
            super().__init__()
            self.config = config
            self.proj = nn.Linear(config.h, width(config.h, config.k), bias=False)

        @typed_flops
        def forward(self, x: Float[Tensor, "b h"]) -> Float[Tensor, "b e"]:
            out: Tensor = self.proj(x)
            return out

    return Widened


def _products(module: nn.Module, x: Tensor) -> int:
    with FlopCounterMode(display=False) as counter:
        module(x)
    count: int = counter.get_total_flops()
    return count


@pytest.mark.parametrize(
    ("width", "h", "k"),
    [
        # a size of 1 divides everything: every run the fits made kept h // k exact
        (lambda h, k: (h // k) ** 2, 64, 1),
        (lambda h, k: h + h // k, 64, 1),
        # floored only where both are odd: each alone off its multiples keeps it exact
        (lambda h, k: h * k // 2, 8, 2),
        (lambda h, k: h * k // 2, 30, 4),
    ],
    ids=["(h//k)**2", "h + h//k", "h*k//2 at 8, 2", "h*k//2 at 30, 4"],
)
def test_a_floored_width_is_never_exact_and_wrong(
    width: Callable[[int, int], int], h: int, k: int
) -> None:
    widened = _widened(width)
    cost = widened.forward.estimate(widened(Widths(h, k)), b=2, h=h)
    assert cost.forward.holds_at(cost.dims)
    names = {str(s) for s in cost.formula.free_symbols}
    checked = 0
    for other_h, other_k in [(h, 5), (h + 1, 2), (h + 1, 3), (2 * h + 1, 5), (7, 3)]:
        if cost.forward.exact and {"h", "k"} <= names:
            truth = _products(widened(Widths(other_h, other_k)), torch.randn(2, other_h))
            assert cost.forward.at({**cost.dims, "h": other_h, "k": other_k}) == truth
            checked += 1
    # (exact, it names both sizes and holds at each; else it is marked inexact)
    assert checked in (0, 5)


@dataclasses.dataclass
class LMConfig:
    d: int = 32
    n_head: int = 4
    n_kv_head: int = 4
    vocab: int = 32
    intermediate: int = 128


class GroupedLM(nn.Module):
    """One block of a language model with grouped-query attention (queries, keys and
    values from one fused projection; keys and values repeated to the query heads, once
    over where the counts are equal) and an MLP.

    ``ids``: (b, n) -> (b, n, v)."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        if config.d % config.n_head or config.n_head % config.n_kv_head:
            raise ValueError("n_head must divide d, and n_kv_head n_head")
        self.config = config
        self.head_dim = config.d // config.n_head
        self.emb = nn.Embedding(config.vocab, config.d)
        kv_width = config.n_kv_head * self.head_dim
        self.qkv = nn.Linear(config.d, config.d + 2 * kv_width, bias=False)
        self.o = nn.Linear(config.d, config.d, bias=False)
        self.up = nn.Linear(config.d, config.intermediate)
        self.down = nn.Linear(config.intermediate, config.d)
        self.head = nn.Linear(config.d, config.vocab, bias=False)

    @typed_flops
    def forward(self, ids: Int[Tensor, "b n"]) -> Float[Tensor, "b n v"]:
        c = self.config
        x = self.emb(ids)
        batch, seq, width = x.shape
        kv_width = c.n_kv_head * self.head_dim
        q, k, v = self.qkv(x).split([width, kv_width, kv_width], dim=-1)
        q = q.reshape(batch, seq, c.n_head, self.head_dim).transpose(1, 2)
        k = k.reshape(batch, seq, c.n_kv_head, self.head_dim).transpose(1, 2)
        v = v.reshape(batch, seq, c.n_kv_head, self.head_dim).transpose(1, 2)
        k = k.repeat_interleave(c.n_head // c.n_kv_head, dim=1)
        v = v.repeat_interleave(c.n_head // c.n_kv_head, dim=1)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(batch, seq, width))
        x = x + self.down(nn.functional.gelu(self.up(x)))
        out: Tensor = self.head(x)
        return out


def test_coinciding_sizes_of_a_config_are_each_a_symbol() -> None:
    # n_head == n_kv_head, d == vocab, intermediate == 4 * d
    cost = GroupedLM.forward.estimate(GroupedLM(LMConfig()), b=2, n=8)
    # (causal attention on a CPU computes every pair up to 512 keys, fewer past them: its
    # row, and so the forward, are not exact in n; every other row is)
    rows = [op for op in cost.ops if op.op != "scaled_dot_product_attention"]
    assert all(op.forward.exact for op in rows) and len(rows) == len(cost.ops) - 1
    names = {str(s) for s in cost.formula.free_symbols}
    assert names == {"b", "n", "d", "n_head", "n_kv_head", "v", "intermediate"}
    for changed in [
        {"d": 48},
        {"n_head": 8},
        {"n_kv_head": 2},
        {"vocab": 50},
        {"intermediate": 96},
        {"d": 64, "n_head": 8, "n_kv_head": 2, "vocab": 40, "intermediate": 200},
    ]:
        config = dataclasses.replace(LMConfig(), **changed)
        ids = torch.randint(0, config.vocab, (3, 5))
        with record() as rec:
            GroupedLM(config)(ids)
        sizes = {**dataclasses.asdict(config), "v": config.vocab, "b": 3, "n": 5}
        assert cost.forward.at({**cost.dims, **sizes}) == rec.total.flops, changed


def test_a_size_the_body_only_compares_gets_no_part_at_one() -> None:
    """``threshold`` enters no formula (the body compares the heads with it): built at 1
    it takes the branch, which is no part of a size at 1. The backward was marked exact
    with a part ``b*d*n*KroneckerDelta(1, threshold)``, in a symbol the cost's dims do not
    hold, wrong wherever the heads pass the threshold."""
    module = Branching(Thresholded(128, 2, 5))
    cost = Branching.forward.estimate(module, b=2, n=5, d=128)
    for term in cost.terms.values():
        assert sympy.Symbol("threshold") not in term.formula.free_symbols
        assert term.holds_at(cost.dims)
    assert not cost.backward.exact
    _exact_terms_hold(cost, Thresholded(128, 8, 5), 2, 5)


def test_a_term_that_does_not_hold_at_its_own_sizes_becomes_its_count() -> None:
    """The last check of every estimate: a term whose formula names a symbol the cost's
    dims do not hold, or gives another count there, is reported as its count, inexact."""
    cost = Attention.forward.estimate(Attention(Config()), b=2, n=12, d=64)
    assert _held_at_own_sizes(cost) is cost
    threshold = sympy.Symbol("threshold")
    wrong = Term(cost.backward.count, cost.backward.formula + b * threshold)
    checked = _held_at_own_sizes(cost.with_terms({**cost.terms, "backward": wrong}))
    assert checked.backward == Term(cost.backward.count, sympy.Integer(cost.backward.count), False)
    assert checked.forward == cost.forward
