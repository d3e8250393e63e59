"""``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` are counted as the same ops
inside a decorated call, outside one, under ``no_grad``, in a dry run and on ``meta``:

- in inference (eval, no grad) they run a fused kernel, their "fast path", that no rule
  counts; while a record is open it is off (torch's setting is as it was once it closes);
- a call under ``no_grad`` or ``inference_mode`` is fitted by dry runs without grad, so its
  row has formulas, exact, instead of numbers.

Hand count, self-attention of width E=16, 2 heads, batch 2, sequence 5 (N = 10 tokens): the
packed in-projection 2·N·E·3E = 15,360 and its bias, added apart, 3·N·E = 480; attention
(CPU's fused kernel) 4·b·s·s·E = 3,200; the out-projection 2·N·E·E = 5,120: 24,160. The
encoder layer adds two residual adds (2·N·E), two layer norms with weight and bias
(7·N·E each), its feed-forward 2·2·N·E·F (F=32) and the relu (N·F): 47,520.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
import torch
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import estimate, record, typed_flops

E, HEADS, FF, BATCH, SEQ = 16, 2, 32, 2, 5
TOKENS = BATCH * SEQ
ATTENTION = 2 * TOKENS * E * 3 * E + 3 * TOKENS * E + 4 * BATCH * SEQ * SEQ * E + 2 * TOKENS * E * E
LAYER = ATTENTION + 2 * TOKENS * E + 2 * 7 * TOKENS * E + 2 * 2 * TOKENS * E * FF + TOKENS * FF


class Encoder(nn.Module):
    """A typed encoder block over torch's modules, in their inference fast path's form."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(E, HEADS, FF, batch_first=True, dropout=0.0)
        self.attention = nn.MultiheadAttention(E, HEADS, batch_first=True)

    @typed_flops
    def forward(self, x: Float[Tensor, "b s 16"]) -> Float[Tensor, "b s 16"]:
        y = self.layer(x)
        out: Tensor = self.attention(y, y, y, need_weights=False)[0]
        return out


def _model() -> Encoder:
    torch.manual_seed(0)
    return Encoder().eval()


def test_the_fast_path_is_counted_as_its_modules_ops_inside_a_decorated_call() -> None:
    model = _model()
    x = torch.randn(BATCH, SEQ, E)
    with torch.no_grad(), record() as rec:
        model(x)
    total = rec.total
    assert total.uncounted == ()
    assert total.flops == LAYER + ATTENTION == 71680
    assert [(op.op, op.flops) for op in total.ops] == [("layer", LAYER), ("attention", ATTENTION)]
    with torch.no_grad(), record() as outside:  # the same modules, outside any decorated call
        model.attention(model.layer(x), model.layer(x), model.layer(x), need_weights=False)
    assert outside.total.flops == 3 * LAYER + ATTENTION
    assert total.backward_flops == outside.total.backward_flops == 0  # (no grad)


def test_the_fast_paths_result_and_setting_are_kept() -> None:
    model = _model()
    x = torch.randn(BATCH, SEQ, E)
    with torch.no_grad():
        plain = model(x)
        with record():
            assert not torch.backends.mha.get_fastpath_enabled()
            recorded = model(x)
    torch.testing.assert_close(recorded, plain)
    assert torch.backends.mha.get_fastpath_enabled()


def test_a_fast_path_turned_off_by_the_user_stays_off() -> None:
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with record():
            pass
        assert not torch.backends.mha.get_fastpath_enabled()
    finally:
        torch.backends.mha.set_fastpath_enabled(True)


@pytest.mark.parametrize("threads", [2, 4])
def test_records_in_threads_keep_the_fast_path_off_until_the_last_closes(threads: int) -> None:
    model = _model()
    x = torch.randn(BATCH, SEQ, E)
    opened = threading.Barrier(threads)
    found: list[int] = []

    def run() -> None:
        with torch.no_grad(), record() as rec:
            opened.wait()
            model(x)
            opened.wait()  # every record is open while each counts
        found.append(rec.total.flops)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert found == [LAYER + ATTENTION] * threads
    assert torch.backends.mha.get_fastpath_enabled()


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)

    @typed_flops
    def forward(self, x: Float[Tensor, "n 4"]) -> Float[Tensor, "n 3"]:
        out: Tensor = self.proj(x)
        return out


Mode = Callable[[], AbstractContextManager[object]]


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_a_call_without_grad_has_formulas_fitted_without_grad(mode: Mode) -> None:
    model = Linear()
    with mode(), record() as rec:
        model(torch.randn(5, 4))
        model(torch.randn(7, 4))
    with record() as with_grad:
        model(torch.randn(5, 4))
    rows = [row.cost() for row in rec.calls]
    assert [(c.flops, c.backward_flops, c.exact) for c in rows] == [(120, 0, True), (168, 0, True)]
    assert [str(c.formula) for c in rows] == ["24*n", "24*n"]
    assert str(rows[0].backward_formula) == "0" and rows[0].activation_bytes == 0
    assert rec.total.exact
    (row,) = with_grad.calls
    assert row.cost().exact and row.cost().backward_flops == 2 * 5 * 4 * 3 + 5 * 3


class _PaddedEncoder(nn.Module):
    """``nn.TransformerEncoder`` given a padding mask: where its fast path may run, it first
    checks the mask's alignment (``logical_not``, a value per token) before it decides."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(E, HEADS, FF, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)

    def forward(self, x: Tensor) -> Tensor:
        mask = torch.zeros(x.shape[0], x.shape[1], dtype=torch.bool)
        mask[:, -1] = True
        out: Tensor = self.encoder(x, src_key_padding_mask=mask)
        return out


def test_an_estimate_counts_what_a_record_counts_with_the_fast_path_off() -> None:
    # a dry run ran the mask's check a record (fast path off) does not: 10 FLOPs apart
    torch.manual_seed(0)
    model = _PaddedEncoder().eval()
    cost = estimate(model, Float[Tensor, "b s 16"], b=BATCH, s=SEQ)
    with record() as ran:
        model(torch.randn(BATCH, SEQ, E))
    assert cost.flops == ran.total.flops
    assert "logical_not" not in {op.op for op in cost.ops}
    assert torch.backends.mha.get_fastpath_enabled()  # (set back)
