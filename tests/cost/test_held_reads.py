"""Sizes a module that cannot be rebuilt reads otherwise than as ``self.<name>`` passed
straight to a call are numbers in the formulas and are listed in ``Cost.fixed``: a count
read through a config it keeps, a width passed on through a local name or as a slice's
bound, a count of heads that only divides a width. Each formula is checked against a hand
count and a real run at other sizes, and the module built at another value of the held
size runs another count."""

from __future__ import annotations

from typing import Any

import sympy
import torch
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import record, typed_flops


def _recorded_forward(module: nn.Module, x: Tensor) -> int:
    """The forward FLOPs of a real run of ``module`` on ``x``, as ``record()`` counts them."""
    with record() as rec:
        module(x)
    flops: int = rec.calls[0].cost().flops
    return flops


class SharedLayer(nn.Module):
    """One layer applied as many times as a config it keeps says (ALBERT's shared layers,
    ``range(self.config.n_layers)``), and a window read through a local name for the same
    config; ``tag`` is kept nowhere, so the module cannot be rebuilt."""

    def __init__(self, config: Any, tag: str) -> None:
        super().__init__()
        self.config = config
        self.lin = nn.Linear(config.d_model, config.d_model)

    @typed_flops
    def forward(self, x: Float[Tensor, "b n d_model"]) -> Tensor:
        for _ in range(self.config.n_layers):
            x = torch.tanh(self.lin(x))
        cfg = self.config
        return x.unfold(1, cfg.window, 1).sum(-1)


def _shared(n_layers: int, window: int) -> SharedLayer:
    config = type("Config", (), {"d_model": 8, "n_layers": n_layers, "window": window})()
    return SharedLayer(config, "enc")


def test_a_count_read_through_a_kept_config_is_held() -> None:
    cost = SharedLayer.forward.estimate(_shared(3, 2), b=2, n=5, d_model=8)
    # per position, each of 3 layers: 2*8*8 for the product, 8 for the bias, 8 for the
    # tanh (408); then n - 1 windows of 2 per feature, summed with an add per value:
    # 2*8*(n - 1)
    b, n = sympy.symbols("b n")
    assert cost.exact and sympy.expand(cost.formula - b * (408 * n + 16 * (n - 1))) == 0
    # was {"d_model": 8}: the 3 layers and the window of 2 were unlisted
    assert cost.fixed == {"d_model": 8, "n_layers": 3, "window": 2}
    for bb, nn_ in [(1, 2), (3, 7)]:
        x = torch.randn(bb, nn_, 8)
        assert cost.forward.at({"b": bb, "n": nn_}) == _recorded_forward(_shared(3, 2), x)
    # at another count of layers or another window the count is another: the formula
    # holds at those values only
    x = torch.randn(2, 5, 8)
    assert _recorded_forward(_shared(4, 2), x) == cost.flops + 2 * 5 * 136
    assert _recorded_forward(_shared(3, 3), x) != cost.flops


class PartialRotary(nn.Module):
    """Heads whose width is passed to ``view`` through a local shape (GPT-NeoX's
    ``hidden_shape``, the count of heads left to ``-1``), and a part of each head of
    ``rot`` features, sliced by the attribute, scaled; ``tag`` is kept nowhere, so the
    module cannot be rebuilt."""

    def __init__(self, d: int, n_heads: int, rot: int, tag: str) -> None:
        super().__init__()
        self.head_dim, self.rot = d // n_heads, rot
        self.qkv = nn.Linear(d, 3 * d, bias=False)

    @typed_flops
    def forward(self, x: Float[Tensor, "b n d"]) -> Tensor:
        shape = (*x.shape[:-1], -1, 3 * self.head_dim)
        q, k, v = self.qkv(x).view(shape).transpose(1, 2).chunk(3, dim=-1)
        q = torch.cat([q[..., : self.rot] * 2.0, q[..., self.rot :]], dim=-1)
        out: Tensor = (q @ k.transpose(-1, -2)).softmax(-1) @ v
        return out


def test_a_width_passed_on_through_a_local_name_or_a_slice_is_held() -> None:
    cost = PartialRotary.forward.estimate(PartialRotary(16, 4, 2, "a"), b=2, n=6, d=16)
    # per position: the projection 2*16*48 = 1536; per head (4 of width 4), the 2 features
    # scaled, and over n keys the scores 2*4, the softmax 5 and the mix 2*4: 4*(2 + 21*n)
    b, n = sympy.symbols("b n")
    assert cost.exact and sympy.expand(cost.formula - b * n * (1536 + 4 * (2 + 21 * n))) == 0
    # was {"d": 16, "qkv.out_features": 48}: the heads' width and the part scaled unlisted
    assert cost.fixed == {"d": 16, "qkv.out_features": 48, "head_dim": 4, "rot": 2}
    for bb, nn_ in [(1, 1), (3, 7)]:
        x = torch.randn(bb, nn_, 16)
        got = _recorded_forward(PartialRotary(16, 4, 2, "a"), x)
        assert cost.forward.at({"b": bb, "n": nn_}) == got
    # at another width of heads or another part the count is another: the formula holds
    # at those values only
    x = torch.randn(2, 6, 16)
    assert _recorded_forward(PartialRotary(16, 2, 2, "a"), x) != cost.flops
    assert _recorded_forward(PartialRotary(16, 4, 4, "a"), x) == cost.flops + 2 * 6 * 4 * 2


class HeadsAttention(nn.Module):
    """Attention over ``heads`` heads, read through a local name (``h, d = self.heads,
    self.dim``, as x-transformers' ``Attention`` does) and left to ``view``'s ``-1``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.dim, self.heads = dim, heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        h, d = self.heads, self.dim
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(*x.shape[:-1], h, d // h).transpose(1, 2) for t in (q, k, v))
        out: Tensor = (q @ k.transpose(-1, -2)).softmax(-1) @ v
        return out


class HeadsWrapper(nn.Module):
    """A model built from its sizes whose count of heads only divides its widths; ``tag``
    is kept nowhere, so it cannot be rebuilt."""

    def __init__(self, dim: int, heads: int, tag: str) -> None:
        super().__init__()
        self.dim, self.heads = dim, heads
        self.attn = HeadsAttention(dim, heads)

    @typed_flops
    def forward(self, x: Float[Tensor, "b n dim"]) -> Tensor:
        return self.attn(x)


def test_a_count_of_heads_that_only_divides_a_width_is_held() -> None:
    cost = HeadsWrapper.forward.estimate(HeadsWrapper(16, 4, "a"), b=2, n=6, dim=16)
    # per position: the projection 2*16*48 = 1536; per head (4 of width 4) and key, the
    # scores 2*4, the softmax 5 and the mix 2*4: 4*21*n
    b, n = sympy.symbols("b n")
    assert cost.exact and sympy.expand(cost.formula - b * n * (1536 + 84 * n)) == 0
    # was {"dim": 16, "attn.qkv.out_features": 48}: the 4 heads, which size no weight's
    # axis, unlisted
    assert cost.fixed == {"dim": 16, "heads": 4, "attn.qkv.out_features": 48}
    for bb, nn_ in [(1, 1), (3, 7)]:
        x = torch.randn(bb, nn_, 16)
        got = _recorded_forward(HeadsWrapper(16, 4, "a"), x)
        assert cost.forward.at({"b": bb, "n": nn_}) == got
    # with 2 heads of width 8 the softmax runs on half the scores: the formula holds at
    # 4 heads only
    x = torch.randn(2, 6, 16)
    assert _recorded_forward(HeadsWrapper(16, 2, "a"), x) == cost.flops - 2 * 6 * 2 * 5 * 6
