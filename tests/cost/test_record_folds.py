"""A record folds the ops run outside decorated calls into counts as they come (past
``ROOT_LIMIT`` items, and whenever its rows or total are read while it is open). An op whose
backward is not decided yet (its output held, later read only off the graph) is counted as
decided, whenever the fold came.

Hand counts, per step: ``torch.exp`` of 4 values that require grad is 4 FLOPs, its backward
(the gradient times the output) 4 more if a backward reaches it; ``y > 1`` compares 4
values (4 FLOPs) and reads ``y`` off the graph: once ``y`` is let go, no backward reaches
the ``exp``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import record, typed_flops
from typedflops.cost.engine.recording import ROOT_LIMIT


@pytest.mark.parametrize("steps", [1, 10, ROOT_LIMIT // 2, 2 * ROOT_LIMIT])
def test_folds_keep_an_undecided_backward_until_it_is_decided(steps: int) -> None:
    with record() as rec:
        for _ in range(steps):
            leaf = torch.ones(4, requires_grad=True)
            y = torch.exp(leaf)  # (let go at the next step's: after a fold, now and then)
            _ = y > 1
    # (each y read aside and let go is no result; the last, held where the block ends, is
    # one: a backward may start from it)
    assert (rec.total.flops, rec.total.backward_flops) == (8 * steps, 4)
    assert rec.total.exact


@pytest.mark.parametrize("steps", [1, 2 * ROOT_LIMIT])
def test_outputs_let_go_in_the_records_own_code_reach_backward(steps: int) -> None:
    with record() as rec:
        for _ in range(steps):
            leaf = torch.ones(4, requires_grad=True)
            y = torch.exp(leaf)
    assert (rec.total.flops, rec.total.backward_flops) == (4 * steps, 4 * steps)
    assert y.requires_grad


def test_reading_an_open_records_total_changes_nothing_it_counts() -> None:
    leaf = torch.ones(4, requires_grad=True)
    with record() as rec:
        y = torch.exp(leaf)
        _ = y > 1
        assert rec.total.flops == 8  # (read between torch calls: the last one has ended)
        del y
    assert (rec.total.flops, rec.total.backward_flops) == (8, 0)
    assert [op.op for op in rec.total.ops] == ["exp", "gt"]


def test_a_total_read_in_the_block_counts_every_torch_call_run_so_far() -> None:
    # mm 2·4·16·16 = 2,048 and relu 4·16 = 64; a Linear's addmm 2,048 (its bias added in
    # the product, as FlopCounterMode counts it) and its ReLU 64
    x, w = torch.ones(4, 16), torch.ones(16, 16)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
    with record() as rec:
        y = torch.relu(x @ w)
        assert (rec.total.flops, len(rec.total.ops)) == (2048 + 64, 2)
        model(y)
        assert (rec.total.flops, len(rec.total.ops)) == (2 * (2048 + 64), 4)
    assert (rec.total.flops, rec.total.exact) == (2 * (2048 + 64), True)


@typed_flops
def _scaled(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    return torch.exp(x) * x


_Step = tuple[int, int, int]


def _replay(steps: list[_Step], peek: bool) -> tuple[int, int, int, int]:
    """Run ``steps`` (an action, two picks among the tensors made so far) in a record;
    ``peek``: read its rows and total where an action says so (a fold, then)."""
    pool: list[torch.Tensor] = []
    with record() as rec:
        for action, first, second in steps:
            a = pool[first % len(pool)] if pool else None
            b = pool[second % len(pool)] if pool else None
            if a is None or b is None or action == 0:
                pool.append(torch.ones(4, requires_grad=first % 5 != 0))
            elif action == 1:
                pool.append(torch.exp(a))
            elif action == 2:
                pool.append(a * b)
            elif action == 3:
                _ = a > 1  # (an off-graph read)
            elif action == 4:
                pool.pop(first % len(pool))
            elif action == 5:
                pool.append(_scaled(a))
            elif action == 6:
                pool.append(a.detach())
            elif peek:
                _ = rec.total, rec.calls
    total = rec.total
    return total.flops, total.backward_flops, total.bytes_read, total.bytes_written


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 99), st.integers(0, 99)), max_size=40))
def test_reading_an_open_record_never_changes_its_total(steps: list[_Step]) -> None:
    assert _replay(steps, peek=True) == _replay(steps, peek=False)
