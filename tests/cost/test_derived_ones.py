"""A size the body derives from its dims (a head's width ``d // n_head``, a quarter of a
width, the count of a convolution's windows ``seq - kernel + 1``) can be 1 at sizes no fit
took, and there torch runs other ops: the heads' merge ``(b, h, s, 1) -> (b, s, h)`` is a
view where it was a copy, so the projection after it takes a strided input and adds its
bias apart (``F.linear`` fuses it into ``addmm`` only for a contiguous input; FlopCounterMode
counts neither bias). A formula marked exact holds there too: checked against real runs
(``record()`` around forward and backward) of the module built at those sizes."""

from __future__ import annotations

import dataclasses
import math

import pytest
import sympy
import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Cost, estimate, record
from typedflops.cost.types import above_one

batch, seq, d, n_head = sympy.symbols("batch seq d n_head")


@dataclasses.dataclass
class BlockConfig:
    d: int = 12
    n_head: int = 4


class Block(nn.Module):
    """nanoGPT's attention written out, not annotated: ``x`` (batch, seq, d) -> (batch,
    seq, d), heads of ``d // n_head``."""

    def __init__(self, config: BlockConfig) -> None:
        super().__init__()
        self.config = config
        self.n_head = config.n_head
        self.attn = nn.Linear(config.d, 3 * config.d)
        self.proj = nn.Linear(config.d, config.d)

    def forward(self, x: Tensor) -> Tensor:
        b, s, width = x.shape
        q, k, v = (
            t.view(b, s, self.n_head, width // self.n_head).transpose(1, 2)
            for t in self.attn(x).split(width, 2)
        )
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, width)
        out: Tensor = self.proj(y)
        return out


class Split(nn.Module):
    """The width split in ``parts`` of ``d // parts``, mixed along the sequence, merged and
    projected: ``x`` (batch, seq, d) -> (batch, seq, d)."""

    def __init__(self, d: int, parts: int) -> None:
        super().__init__()
        self.parts = parts
        self.proj = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        b, s, width = x.shape
        q = x.view(b, s, self.parts, width // self.parts).transpose(1, 2)
        out: Tensor = self.proj((q.softmax(-2) * q).transpose(1, 2).reshape(b, s, width))
        return out


class Windows(nn.Module):
    """A convolution over the sequence, no padding (``seq - kernel + 1`` windows), then a
    projection of each window: ``x`` (batch, seq, d) -> (batch, seq - kernel + 1, d)."""

    def __init__(self, d: int, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(d, d, kernel)
        self.proj = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.proj(self.conv(x.transpose(1, 2)).transpose(1, 2))
        return out


def _ran(module: nn.Module, x: Tensor) -> dict[str, int]:
    """What a real forward and backward of ``module`` on ``x`` counted, and
    FlopCounterMode's count of the forward's matrix products."""
    x = x.clone().requires_grad_(True)
    with record() as rec:
        out = module(x)
        out.backward(torch.ones_like(out))
    with FlopCounterMode(display=False) as counter:
        module(x)
    return {
        "forward": rec.total.flops,
        "backward": rec.total.backward_flops,
        "matmul": rec.total.matmul_flops,
        "torch": counter.get_total_flops(),
    }


def _assert_exact_terms_hold(cost: Cost, module: nn.Module, sizes: dict[str, int]) -> None:
    ran = _ran(module, torch.randn(sizes["batch"], sizes["seq"], sizes["d"]))
    values = {**cost.dims, **sizes}
    for name in ("forward", "backward", "matmul"):
        term = cost.terms[name]
        assert term.exact, (name, term)
        assert term.at(values) == ran[name], (name, term.formula, sizes, ran)
    assert cost.matmul.at(values) == ran["torch"]


def test_heads_of_width_one_in_a_block_nobody_annotated_are_counted_as_they_ran() -> None:
    cost = estimate(
        Block(BlockConfig()), Float[Tensor, "batch seq d"], grad=("x",), batch=2, seq=6, d=12
    )
    for width, heads, b, s in [
        (4, 4, 2, 6),
        (8, 8, 3, 5),
        (3, 3, 1, 7),
        (4, 4, 2, 1),
        (4, 4, 1, 1),
        (1, 1, 2, 6),
        (8, 4, 2, 6),
    ]:
        module = Block(BlockConfig(width, heads))
        _assert_exact_terms_hold(cost, module, {"batch": b, "seq": s, "d": width, "n_head": heads})
    # hand count, heads of width 2 and up: the projections 2*d*(3*d + d) per row, the
    # scores and their product with v 2*seq*d each per row, per score the scale and
    # softmax's 5 (FlopCounterMode's convention: addmm's bias is not counted). At width 1
    # the merge is a view, the projection's input strided: its bias is added apart, one
    # add per output, batch*seq*d with d = n_head.
    general = 2 * batch * seq * (4 * d**2 + 2 * seq * d + 3 * n_head * seq)
    assert sympy.expand(above_one(cost.formula) - general) == 0
    # (with one head of width 1 the merge is contiguous: no add apart; nor with one
    # position, (b, h, 1, 1) -> (b, 1, h))
    for heads in (1, 2, 3, 4, 8):
        part = (cost.formula - general).xreplace({d: heads, n_head: heads})
        apart = batch * seq * heads * int(heads > 1) * (1 - sympy.KroneckerDelta(1, seq))
        assert sympy.expand(part - apart) == 0, (heads, part)


@pytest.mark.parametrize("parts", [2, 4])
def test_a_width_split_in_parts_of_one_is_counted_as_it_ran(parts: int) -> None:
    cost = estimate(
        Split(16, parts), Float[Tensor, "batch seq d"], grad=("x",), batch=2, seq=8, d=16
    )
    for b, s in [(2, 8), (3, 5), (2, 1), (1, 3)]:
        module = Split(parts, parts)  # (parts of width 1)
        _assert_exact_terms_hold(cost, module, {"batch": b, "seq": s, "d": parts})
        wider = Split(3 * parts, parts)
        _assert_exact_terms_hold(cost, wider, {"batch": b, "seq": s, "d": 3 * parts})


def test_a_single_window_of_a_convolution_is_counted_as_it_ran() -> None:
    # one window (seq = kernel): the convolution's output (batch, d, 1) transposed is
    # contiguous, and the projection fuses its bias into addmm (not counted); at 2 windows
    # and up it adds the bias apart, batch*windows*d
    cost = estimate(Windows(8, 5), Float[Tensor, "batch seq d"], grad=("x",), batch=2, seq=16, d=8)
    for b, s in [(2, 5), (3, 5), (2, 6), (1, 9)]:
        sizes = {"batch": b, "seq": s, "d": 8}
        _assert_exact_terms_hold(cost, Windows(8, 5), sizes)
    general = above_one(cost.forward.formula)
    windows = seq - 4
    # per window: the convolution 2*d*d*kernel (its bias fused and not counted, as
    # FlopCounterMode), the projection 2*d*d and its bias added apart, d
    per_window = 2 * 8 * 8 * 5 + 2 * 8 * 8 + 8
    assert sympy.expand(general - batch * windows * per_window) == 0, general
    one = cost.forward.formula.xreplace({seq: 5})
    assert sympy.expand(one - batch * (per_window - 8)) == 0
