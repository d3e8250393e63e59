"""A dry run under ``FakeTensorMode`` (where a run on meta cannot go on: here a backward
into a real model's parameters) checks index bounds as a run on meta does, where the
indices' values are known: position ids from ``torch.arange``, a constant the body makes
(``torch.tensor``), a slice of a real buffer. Past the position table's last row the
estimate stops with the SpecError a run on meta gives, where a real run raises
IndexError, instead of counting work that cannot run; inside it, it counts what runs. A
run on meta knows a constant made of Python data too (``torch.tensor``, which no op makes
on meta).

The oracle: a real run (its IndexError past the table, its record inside it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from typedflops import record, typed_flops
from typedflops.cost.engine import runs
from typedflops.errors import SpecError

torch.manual_seed(0)
_AUX = nn.Linear(8, 1)


class _Positions(nn.Module):
    """Token and learned position embeddings (16 positions), a ``position_ids`` buffer of
    32 (longer than the table), a head."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(32, 8)
        self.positions = nn.Embedding(16, 8)
        self.position_ids: Tensor
        self.register_buffer("position_ids", torch.arange(32), persistent=False)
        self.head = nn.Linear(8, 32)

    def forward(self, ids: Tensor, where: Tensor) -> Tensor:
        out: Tensor = self.head(self.tokens(ids) + self.positions(where)).sum()
        return out


_MODEL = _Positions()

_WHERE: dict[str, Callable[[int], Tensor]] = {
    "arange": lambda s: torch.arange(s),
    "a constant": lambda s: torch.tensor(list(range(s))),
    "a real buffer's slice": lambda s: _MODEL.position_ids[:s],
}


def _step(where: Callable[[int], Tensor]) -> Any:
    @typed_flops
    def step(ids: Int[Tensor, "b s"]) -> Float[Tensor, ""]:
        """An auxiliary loss's backward into a real layer, then the positions' model on
        ``ids`` (b, s)."""
        _AUX(torch.ones(1, 8)).sum().backward()  # (real leaves: no run on meta goes on)
        return _MODEL(ids, where(ids.shape[1])).detach()

    return step


@pytest.mark.parametrize("how", list(_WHERE))
def test_a_run_under_fake_tensors_stops_where_an_index_is_out_of_bounds(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = _step(_WHERE[how])
    fake_runs: list[bool] = []
    run_once = runs.run_once

    def noted(probe: Any, assignment: Any, *, fake: bool = False, **options: Any) -> Any:
        fake_runs.append(fake)
        return run_once(probe, assignment, fake=fake, **options)

    monkeypatch.setattr(runs, "run_once", noted)
    with pytest.raises(IndexError):
        step(torch.randint(0, 32, (2, 17)))
    with pytest.raises(SpecError, match="index 16 is out of bounds for dimension 0 with size 16"):
        step.estimate(b=2, s=17)
    assert fake_runs[:2] == [False, True]  # (the run on meta failed; then under fake tensors)
    cost = step.estimate(b=2, s=8)
    with record() as rec:
        step(torch.randint(0, 32, (2, 8)))
    assert cost.flops == rec.total.flops
    assert cost.backward_flops == rec.total.backward_flops


@typed_flops
def _constant_positions(ids: Int[Tensor, "b s"]) -> Float[Tensor, ""]:
    """The positions' model on ``ids`` (b, s), its position ids a constant made of Python
    data (no op a dispatch mode sees makes it on meta)."""
    return _MODEL(ids, torch.tensor(list(range(ids.shape[1])))).detach()


def test_a_run_on_meta_knows_a_constant_made_of_python_data() -> None:
    with pytest.raises(IndexError):
        _constant_positions(torch.randint(0, 32, (2, 17)))
    with pytest.raises(SpecError, match="index 16 is out of bounds for dimension 0 with size 16"):
        _constant_positions.estimate(b=2, s=17)
    cost = _constant_positions.estimate(b=2, s=8)
    assert cost.exact
    for b, s in [(2, 8), (3, 16), (1, 5)]:
        with record() as rec:
            _constant_positions(torch.randint(0, 32, (b, s)))
        assert cost.forward.at({"b": b, "s": s}) == rec.total.flops
