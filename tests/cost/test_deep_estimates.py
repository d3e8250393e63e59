"""Deep models' estimates: exact counts from a stack of thousands of equal blocks (what the
engine works out once rather than once per op must change no count), checked against a hand
count and against FlopCounterMode on a real forward and backward."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import sympy
import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode, addmm_flop

from typedflops import estimate
from typedflops.cost.engine.fit import Size
from typedflops.cost.engine.memo import fit_key, remembered_shapes
from typedflops.cost.engine.op_events import make_event
from typedflops.cost.engine.rules import find_rule
from typedflops.cost.engine.runs import Counted, Run, Runner
from typedflops.cost.engine.tensors import describe

WIDTH = 16


def _deep(blocks: int) -> nn.Sequential:
    return nn.Sequential(
        *[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(blocks)]
    )


def test_a_stack_of_two_thousand_blocks_counts_exactly() -> None:
    # Per block, with b rows of width 16 (docs/costs.md):
    #   forward:  addmm 2·b·16·16 = 512·b (its bias not counted), relu 16·b   -> 528·b
    #   backward: relu's 16·b, the weight's product 512·b, the bias's sum over the rows
    #             16·b, the input's product 512·b but at the first block (the model's
    #             input needs no grad)                                        -> 1056·b
    #   matmul:   the forward's products, 512·b
    #   saved:    each ReLU's output (b·16 float32 = 64·b bytes; the next Linear saves the
    #             same storage) and the model's input once -> 64·b·(N + 1)
    blocks = 2000
    b = sympy.Symbol("b")
    cost = estimate(_deep(blocks), Float[Tensor, "b 16"], b=4)
    assert cost.forward.formula == 528 * blocks * b
    assert cost.backward.formula == (1056 * blocks - 512) * b
    assert cost.matmul.formula == 512 * blocks * b
    assert cost.activation.formula == 64 * (blocks + 1) * b
    assert (cost.flops, cost.backward_flops) == (4_224_000, 8_445_952)
    assert all(term.exact for term in cost.terms.values())
    # FlopCounterMode counts the products only: ours less, per block, the forward's ReLU
    # (16·b) and backward's ReLU and bias sum (16·b each), at b=4.
    with FlopCounterMode(display=False) as counter:
        _deep(blocks)(torch.randn(4, WIDTH)).sum().backward()
    assert counter.get_total_flops() == cost.flops + cost.backward_flops - 48 * 4 * blocks
    assert counter.get_total_flops() == 2048 * blocks + 4096 * blocks - 2048


def test_a_count_by_torchs_formula_remembered_is_the_formula() -> None:
    # addmm's count is 2·m·n·k whatever the first argument (the bias) is
    count = remembered_shapes(addmm_flop.__wrapped__)  # type: ignore[attr-defined]
    for _ in range(2):  # (worked out, then remembered)
        assert count((16,), (4, 16), (16, 8)) == 2 * 4 * 16 * 8
    assert count((16,), (5, 16), (16, 8)) == 2 * 5 * 16 * 8
    assert count([16], [4, 16], [16, 8]) == 1024  # (lists: no key, worked out each time)


def test_ops_alike_share_a_fit_key_and_others_do_not() -> None:
    with torch.device("meta"):
        x, w = torch.empty(4, WIDTH), torch.empty(WIDTH, WIDTH)
        y = torch.empty(8, WIDTH)
    mm = torch.ops.aten.mm.default
    first = make_event(mm, find_rule(mm), (x, w), {}, x @ w)
    again = make_event(mm, find_rule(mm), (x, w), {}, x @ w)
    other = make_event(mm, find_rule(mm), (y, w), {}, y @ w)
    assert (first.flops, other.flops) == (2 * 4 * 16 * 16, 2 * 8 * 16 * 16)
    assert first.args[0] is again.args[0]  # (one description per distinct tensor metadata)
    assert describe(x) == describe(torch.empty(4, WIDTH, device="meta"))
    assert fit_key([first, first]) == fit_key([again, again])
    assert fit_key([first, first]) != fit_key([first, other])
    first.kwargs = (("index", slice(0, 2)),)  # (no key can hold a slice)
    assert fit_key([first]) is None


def test_a_far_check_keeps_counts_not_events(monkeypatch: pytest.MonkeyPatch) -> None:
    # Three blocks: forward 3·528·b, backward (3·1056 - 512)·b (see above); the far check
    # above runs b = 64·4 + 1 = 257, raised to 1,025
    runners: list[Runner] = []
    base = Runner.base

    def noting(self: Runner, assignment: Mapping[str, Size]) -> Run:
        runners.append(self)
        return base(self, assignment)

    monkeypatch.setattr(Runner, "base", noting)
    estimate(_deep(3), Float[Tensor, "b 16"], b=4)
    runner = runners[0]
    kept = runner.run({"b": 4})
    assert kept is not None
    assert runner.counted({"b": 4}) is kept  # a run kept whole answers for its counts
    far = runner.counted({"b": 1025})
    assert isinstance(far, Counted)  # its events let go
    assert far.counts()["forward"] == 3 * 528 * 1025
    assert far.counts()["backward"] == (3 * 1056 - 512) * 1025
    assert kept.counts()["forward"] == 3 * 528 * 4
    assert far.ops == kept.ops
