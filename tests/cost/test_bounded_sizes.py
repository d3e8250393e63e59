"""Sizes bounded by a table the body indexes (learned positions: ``seq`` at most the
table's length) are fitted and checked inside the bound: the formula keeps the symbol, is
exact, and gives what real runs count at sizes up to the bound; past it the estimate stops
where a real run does. So it goes for a model built on ``meta``, for a position buffer
sliced to the input's length (BERT's ``position_ids[:, :seq]``, an ``alias`` at the full
length), for a branch inside the bound (checked at sizes below the bound that run),
and for a model in eval mode rebuilt at other sizes (each new block in eval mode too).
"""

from __future__ import annotations

import pytest
import torch
from jaxtyping import Float, Int
from real_runs import ran
from torch import Tensor, nn

from typedflops import estimate
from typedflops.errors import SpecError


class SlicedPositions(nn.Module):
    """Token and learned position embeddings over ``(batch, seq)`` ids, the positions a
    ``position_ids`` buffer of the table's length sliced to ``seq`` (as BERT writes it),
    then attention-like mixing (a ``seq**2`` part) and a head."""

    def __init__(self, positions: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(32, 8)
        self.positions = nn.Embedding(positions, 8)
        self.position_ids: Tensor
        self.register_buffer("position_ids", torch.arange(positions).expand(1, -1), False)
        self.mix = nn.Linear(8, 8)
        self.head = nn.Linear(8, 32)

    def forward(self, ids: Int[Tensor, "b s"]) -> Tensor:
        where = self.position_ids[:, : ids.shape[1]]
        x = self.tokens(ids) + self.positions(where)
        x = torch.softmax(x @ x.transpose(1, 2), dim=-1) @ x
        out: Tensor = self.head(torch.relu(self.mix(x))).sum()
        return out


class ReadPositions(nn.Module):
    """Learned positions from ``arange``, read before use where ``read`` (as transformers
    asks whether position ids hold packed sequences): a value the shapes fix."""

    def __init__(self, positions: int, read: bool) -> None:
        super().__init__()
        self.read = read
        self.tokens = nn.Embedding(32, 8)
        self.positions = nn.Embedding(positions, 8)
        self.head = nn.Linear(8, 32)

    def forward(self, ids: Int[Tensor, "b s"]) -> Tensor:
        where = torch.arange(ids.shape[1], device=ids.device)
        if self.read and bool((where[1:] - where[:-1] != 1).any()):
            where = where - where.min()
        out: Tensor = self.head(self.tokens(ids) + self.positions(where)).sum()
        return out


def _held_at(model: nn.Module, b: int, s: int, sizes: list[tuple[int, int]]) -> None:
    """The estimate at ``b``, ``s`` is exact in both and gives what real runs count at
    ``sizes``."""
    cost = estimate(model, Int[Tensor, "b s"], b=b, s=s)
    assert cost.exact
    assert {"b", "s"} <= {str(symbol) for symbol in cost.formula.free_symbols}
    for batch, seq in sizes:
        torch.manual_seed(0)
        ids = torch.randint(0, 32, (batch, seq))
        at = {"b": batch, "s": seq}
        assert (cost.forward.at(at), cost.backward.at(at)) == ran(model, ids), at


@pytest.mark.parametrize("s", [16, 15])
def test_a_sliced_position_buffer_keeps_seq_up_to_its_length(s: int) -> None:
    # before: at s=16 the slice of the whole buffer is an alias, other ops than at 15, and
    # the runs past 16 fail: seq was a number in a formula marked inexact
    model = SlicedPositions(16)
    _held_at(model, 2, s, [(2, 16), (3, 5), (1, 15), (2, 9)])
    with pytest.raises(SpecError, match="at b=2, s=17 the body fails"):
        estimate(model, Int[Tensor, "b s"], b=2, s=17)


@pytest.mark.parametrize(("s", "read"), [(16, False), (15, True), (7, True)])
def test_a_model_built_on_meta_is_checked_against_its_tables(s: int, read: bool) -> None:
    # before: a model built on meta (no device to stand for) kept no values in its dry
    # runs: at s=17 it counted 552*b*s, exact, where a real run fails, and the position
    # ids' read stopped the estimate
    with torch.device("meta"):
        model = ReadPositions(16, read)
    with pytest.raises(SpecError, match="index 16 is out of bounds for dimension 0 with size 16"):
        estimate(model, Int[Tensor, "b s"], b=2, s=17)
    cost = estimate(model, Int[Tensor, "b s"], b=2, s=s)
    assert cost.exact
    real = ReadPositions(16, read)
    for b, n in [(2, 16), (3, 5), (1, 15)]:
        ids = torch.randint(0, 32, (b, n))
        at = {"b": b, "s": n}
        assert (cost.forward.at(at), cost.backward.at(at)) == ran(real, ids), (b, n)


class Windowed(nn.Module):
    """Learned positions (256 of them), and more work past 64 positions: a branch inside
    the table's bound."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(32, 8)
        self.positions = nn.Embedding(256, 8)
        self.head = nn.Linear(8, 32)

    def forward(self, ids: Int[Tensor, "b s"]) -> Tensor:
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        if ids.shape[1] > 64:
            x = x * 2
        out: Tensor = self.head(x).sum()
        return out


def test_a_branch_inside_a_table_bound_is_seen() -> None:
    # before: the far checks at seq=1025..1032 run past the 256 positions and fail;
    # nothing checked seq above 24, and 552*b*s was exact, a multiply a value short past
    # 64. Now the distance is halved to sizes that run (135, 198, 230, 246): refuted.
    model = Windowed()
    cost = estimate(model, Int[Tensor, "b s"], b=2, s=8)
    assert not cost.exact
    assert (cost.forward.at({"b": 2, "s": 8}), cost.backward.at({"b": 2, "s": 8})) == ran(
        model, torch.randint(0, 32, (2, 8))
    )
    formula = estimate(model, Int[Tensor, "b s"], b=2, s=100)
    assert (formula.flops, formula.backward_flops) == ran(model, torch.randint(0, 32, (2, 100)))


class Block(nn.Module):
    """A linear layer, then dropout (which runs work in training mode only)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.linear = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.drop(torch.relu(self.linear(x)))
        return out


class Stack(nn.Module):
    """``n_layers`` blocks of width ``d``, summed."""

    def __init__(self, d: int, n_layers: int) -> None:
        super().__init__()
        self.d, self.n_layers = d, n_layers
        self.blocks = nn.ModuleList(Block(d) for _ in range(n_layers))

    def forward(self, x: Float[Tensor, "b d"]) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return x.sum()


def test_a_model_in_eval_mode_is_rebuilt_in_eval_mode() -> None:
    # before: rebuilt with 4 blocks, the 4th was in training mode (its dropout ran), so
    # the count of blocks was refuted and the formula not exact
    model = Stack(8, 3).eval()
    cost = estimate(model, Float[Tensor, "b d"], b=4, d=8)
    assert cost.exact
    assert "n_layers" in {str(symbol) for symbol in cost.formula.free_symbols}
    for d, layers, b in [(8, 1, 4), (8, 5, 2), (16, 2, 3)]:
        other = Stack(d, layers).eval()
        x = torch.randn(b, d)
        at = {"b": b, "d": d, "n_layers": layers}
        assert (cost.forward.at(at), cost.backward.at(at)) == ran(other, x), (d, layers, b)
