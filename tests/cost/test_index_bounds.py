"""Indices a dry run knows (``torch.arange(seq)`` position ids) are checked against the
tables they index, as a real run's kernels check them: an estimate at sizes a real run
refuses (a model with 16 positions at ``seq=17``) stops at the user's line with torch's
reason, instead of counting work that cannot run; at a size at its most (``seq`` equal to
the positions) the formula is fitted from sizes below it, exact, and true at other sizes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from jaxtyping import Float, Int
from real_runs import ran
from torch import Tensor, nn

from typedflops import estimate
from typedflops.errors import SpecError


class TinyLM(nn.Module):
    """Token and learned position embeddings (``positions`` rows), one linear layer and a
    head over ``(batch, seq)`` ids, written the usual way: the positions from ``arange``."""

    def __init__(self, positions: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(32, 8)
        self.positions = nn.Embedding(positions, 8)
        self.mix = nn.Linear(8, 8)
        self.head = nn.Linear(8, 32)

    def forward(self, ids: Int[Tensor, "b s"]) -> Tensor:
        where = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(where)
        out: Tensor = self.head(torch.relu(self.mix(x))).sum()
        return out


def test_an_estimate_past_the_positions_stops_where_a_real_run_does() -> None:
    # before: 2*b*s*... counted at seq=17, exact, where a real run raises
    model = TinyLM(16)
    with pytest.raises(IndexError, match="index out of range in self"):
        model(torch.zeros(2, 17, dtype=torch.long))
    with pytest.raises(SpecError) as caught:
        estimate(model, Int[Tensor, "b s"], b=2, s=17)
    line = TinyLM.forward.__code__.co_firstlineno + 2
    assert str(caught.value).splitlines()[0] == (
        f"TinyLM(): at b=2, s=17 the body fails at test_index_bounds.py:{line} "
        "(x = self.tokens(ids) + self.positions(where)): IndexError: index 16 is out of "
        "bounds for dimension 0 with size 16; give sizes the body can run at"
    )


@pytest.mark.parametrize("positions", [16, 15])
def test_a_size_at_its_most_is_fitted_below_it(positions: int) -> None:
    # before: at seq == positions the fit's runs above it ran on meta past the table;
    # with those refused, the runs below it fit and check the formula
    torch.manual_seed(0)
    model = TinyLM(positions)
    cost = estimate(model, Int[Tensor, "b s"], b=2, s=positions)
    assert cost.exact
    for b, s in [(2, positions), (3, 5), (1, positions - 1)]:
        ids = torch.randint(0, 32, (b, s))
        assert (cost.forward.at({"b": b, "s": s}), cost.backward.at({"b": b, "s": s})) == ran(
            model, ids
        )


def _positions(n: int) -> Tensor:
    return torch.arange(n)


# Each: the op on a (5, 3) source with indices made from ``arange(n)`` (known to a dry
# run), which is out of bounds at n = 6 (from_end: also counting from the end).
_OPS: dict[str, Callable[[Tensor, int], Tensor]] = {
    "index_select": lambda x, n: x.index_select(0, _positions(n)),
    "gather": lambda x, n: x.gather(0, _positions(n)[:, None].expand(n, 3)),
    "getitem": lambda x, n: x[_positions(n)],
    "take": lambda x, n: x.take(_positions(n) * 3),
    "scatter_add": lambda x, n: x.scatter_add(
        0, _positions(n)[:, None].expand(n, 3), torch.ones(n, 3)
    ),
    "index_add": lambda x, n: x.index_add(0, _positions(n), torch.ones(n, 3)),
    "index_put": lambda x, n: x.index_put((_positions(n),), torch.ones(3)),
}


class Indexed(nn.Module):
    def __init__(self, op: str, n: int) -> None:
        super().__init__()
        self.op, self.n = op, n

    def forward(self, x: Float[Tensor, "5 3"]) -> Tensor:
        return (_OPS[self.op](x, self.n) * 2).sum()


@pytest.mark.parametrize("op", sorted(_OPS))
def test_known_indices_out_of_bounds_stop_the_estimate(op: str) -> None:
    model = Indexed(op, 6)
    with pytest.raises((IndexError, RuntimeError)) as real:
        model(torch.randn(5, 3))
    with pytest.raises(SpecError) as caught:
        estimate(model, Float[Tensor, "5 3"])
    line = str(caught.value).splitlines()[0]
    assert line.startswith("Indexed(): the body fails at test_index_bounds.py:"), line
    assert "out of" in str(real.value)
    if op == "take":  # (indices into the flattened source: torch's words for them)
        reason = "out of range: tried to access index 15 on a tensor of 15 elements."
    else:
        reason = "index 5 is out of bounds for dimension 0 with size 5"
    assert line.endswith(f": IndexError: {reason}"), line


@pytest.mark.parametrize("op", sorted(_OPS))
def test_known_indices_in_bounds_are_counted_as_a_real_run(op: str) -> None:
    model = Indexed(op, 5)
    x = torch.randn(5, 3, requires_grad=True)
    cost = estimate(model, Float[Tensor, "5 3"], grad=("x",))
    assert (cost.flops, cost.backward_flops) == ran(model, x)
