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

from typedflops import record
from typedflops.cost.engine.recording import ROOT_LIMIT


@pytest.mark.parametrize("steps", [1, 10, ROOT_LIMIT // 2, 2 * ROOT_LIMIT])
def test_folds_keep_an_undecided_backward_until_it_is_decided(steps: int) -> None:
    with record() as rec:
        for _ in range(steps):
            leaf = torch.ones(4, requires_grad=True)
            y = torch.exp(leaf)  # (let go at the next step's: after a fold, now and then)
            _ = y > 1
    assert (rec.total.flops, rec.total.backward_flops) == (8 * steps, 0)
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
        assert rec.total.flops == 4  # (the exp, folded: the last call may not have ended)
        del y
    assert (rec.total.flops, rec.total.backward_flops) == (8, 0)
    assert [op.op for op in rec.total.ops] == ["exp", "gt"]
