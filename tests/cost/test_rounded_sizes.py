"""Sizes a constructor rounds: a formula fitted where the rounding is the identity (every
multiple of a large enough value) is not exact, since the module built at a size off those
multiples runs other widths. Sizes a config inside a config holds, which no rebuild
changes, are listed in ``Cost.fixed``."""

from __future__ import annotations

import dataclasses

import sympy
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from typedflops import Cost, estimate


class PaddedHead(nn.Module):
    """An output layer whose vocabulary is padded to a multiple of 64 (as Megatron pads it)."""

    def __init__(self, d: int, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.head = nn.Linear(d, (vocab + 63) // 64 * 64, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.head(x)
        return out


class Head(nn.Module):
    """The same layer unpadded."""

    def __init__(self, d: int, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.head(x)
        return out


def _head_cost(cls: type[nn.Module], vocab: int) -> Cost:
    with torch.device("meta"):
        model = cls(64, vocab)
    return estimate(model, x=Float[Tensor, "b s d"], b=1, s=64, d=64)


def test_a_vocabulary_padded_to_a_multiple_is_not_exact_in_it() -> None:
    # At 32768 the padding is the identity at twice, three and sixteen times it and at a
    # 16th of it; at 50257 the layer is 50304 wide.
    cost = _head_cost(PaddedHead, 32768)
    assert cost.flops == 2 * 64 * 64 * 32768
    assert not cost.exact
    b, s, d, vocab = sympy.symbols("b s d vocab")
    assert cost.formula == 2 * b * d * s * vocab  # true at its own sizes, and marked so
    assert cost.forward.at({**cost.dims, "vocab": 50257}) == 411_705_344
    assert _head_cost(PaddedHead, 50257).flops == 2 * 64 * 64 * 50304 == 412_090_368


def test_an_unpadded_vocabulary_stays_exact() -> None:
    cost = _head_cost(Head, 32768)
    b, s, d, vocab = sympy.symbols("b s d vocab")
    assert cost.exact and cost.formula == 2 * b * d * s * vocab
    assert cost.forward.at({**cost.dims, "vocab": 50257}) == _head_cost(Head, 50257).flops


MULTIPLE_OF = 256


class FeedForward(nn.Module):
    """LLaMA's feed-forward block: its width 2/3 of ``hidden_dim``, rounded up to a
    multiple of ``MULTIPLE_OF``."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        hidden_dim = MULTIPLE_OF * ((hidden_dim + MULTIPLE_OF - 1) // MULTIPLE_OF)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


class TinyLlama(nn.Module):
    def __init__(self, vocab_size: int, dim: int, n_heads: int) -> None:
        super().__init__()
        self.vocab_size, self.dim, self.n_heads = vocab_size, dim, n_heads
        self.emb = nn.Embedding(vocab_size, dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.ff = FeedForward(dim, 4 * dim)
        self.out = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, ids: Tensor) -> Tensor:
        h = self.emb(ids)
        b, s, d = h.shape
        q, k, v = self.qkv(h).view(b, s, 3, self.n_heads, d // self.n_heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        h = h + y.transpose(1, 2).reshape(b, s, d)
        out: Tensor = self.out(h + self.ff(h))
        return out


def _llama_cost(dim: int) -> Cost:
    with torch.device("meta"):
        model = TinyLlama(100, dim, 24)
    return estimate(model, Int[Tensor, "b s"], b=1, s=96)


def test_llama_feed_forward_width_rounded_up_is_not_exact_in_dim() -> None:
    # At dim=3072 (Llama 3.2 3B's) the width is 8192 = 8 * dim / 3, as at every multiple
    # of 96 the checks took (6144, 9216, 49152 and 192); at dim=1536 + 24 it is not.
    cost = _llama_cost(3072)
    assert not cost.exact
    dim = sympy.Symbol("dim")
    assert "dim" in {str(s) for s in cost.formula.free_symbols}
    assert cost.forward.holds_at(cost.dims)
    other = _llama_cost(1560)  # 8 * 1560 / 3 = 4160, run 4352 wide
    assert cost.forward.at({**cost.dims, "dim": 1560}) != other.flops
    assert dim in cost.formula.free_symbols


class LlamaBlock(nn.Module):
    """Attention and LLaMA's rounded feed-forward over an input of width ``dim``."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.dim, self.n_heads = dim, n_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.ff = FeedForward(dim, 4 * dim)

    def forward(self, x: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.n_heads, d // self.n_heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        h = x + y.transpose(1, 2).reshape(b, s, d)
        out: Tensor = h + self.ff(h)
        return out


def _block_cost(dim: int) -> Cost:
    with torch.device("meta"):
        model = LlamaBlock(dim, 24)
    return estimate(model, x=Float[Tensor, "b s dim"], b=1, s=96, dim=dim)


def test_a_rounded_width_of_a_dim_tied_to_the_input_is_not_exact() -> None:
    # The input's dim is the module's: its far checks (2, 64 * 3072 + 1) are refused by
    # 24 heads, and every other run is at a multiple of 96. At 1560 the formula gives
    # 5,199,774,720 where 5,372,335,104 run.
    cost = _block_cost(3072)
    assert not cost.exact
    assert cost.forward.holds_at(cost.dims)
    assert cost.forward.at({**cost.dims, "dim": 1560}) == 5_199_774_720
    assert _block_cost(1560).flops == 5_372_335_104


@dataclasses.dataclass
class MlpConfig:
    hidden: int = 256


@dataclasses.dataclass
class Config:
    d: int = 64
    mlp: MlpConfig = dataclasses.field(default_factory=MlpConfig)


class NestedConfigMlp(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.up = nn.Linear(config.d, config.mlp.hidden)
        self.down = nn.Linear(config.mlp.hidden, config.d)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down(F.gelu(self.up(x)))
        return out


def test_a_size_in_a_config_inside_the_config_is_held() -> None:
    with torch.device("meta"):
        model = NestedConfigMlp(Config())
    cost = estimate(model, x=Float[Tensor, "b s d"], b=2, s=8, d=64)
    b, s, d = sympy.symbols("b s d")
    assert cost.exact and sympy.expand(cost.formula - 256 * b * s * (4 * d + 1)) == 0
    assert cost.fixed == {"mlp.hidden": 256}
    assert "held fixed (numbers in the formulas): mlp.hidden=256" in str(cost)


@dataclasses.dataclass
class HeadsConfig:
    n_heads: int = 4
    head_dim: int = 16
    pad_token_id: int = 2  # (an id: divides the widths, sizes nothing)


@dataclasses.dataclass
class AttentionConfig:
    d: int = 64
    attn: HeadsConfig = dataclasses.field(default_factory=HeadsConfig)


class NestedConfigAttention(nn.Module):
    def __init__(self, config: AttentionConfig) -> None:
        super().__init__()
        self.config = config
        inner = config.attn.n_heads * config.attn.head_dim
        self.qkv = nn.Linear(config.d, 3 * inner)
        self.out = nn.Linear(inner, config.d)

    def forward(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        h, hd = self.config.attn.n_heads, self.config.attn.head_dim
        q, k, v = self.qkv(x).view(b, s, 3, h, hd).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) * hd**-0.5
        y = scores.softmax(-1) @ v
        out: Tensor = self.out(y.transpose(1, 2).reshape(b, s, h * hd))
        return out


def test_head_counts_in_a_config_inside_the_config_are_held() -> None:
    # Only the product of n_heads and head_dim sizes a weight (64 = 4 * 16); n_heads alone is
    # the 4 of the scores' scale, head_dim the 16 of each head's products: numbers in the
    # formula, listed where they are held.
    with torch.device("meta"):
        model = NestedConfigAttention(AttentionConfig())
    cost = estimate(model, x=Float[Tensor, "b s d"], b=2, s=8, d=64)
    b, s, d = sympy.symbols("b s d")
    # Per position: qkv 2*d*192 and out 2*64*d (a linear's bias add is not counted),
    # scores and mixing 2*64*s each, the scale 4*s, softmax 5 a value over 4*s: 512*d + 280*s.
    assert sympy.expand(cost.formula - 8 * b * s * (64 * d + 35 * s)) == 0
    assert cost.fixed == {"attn.n_heads": 4, "attn.head_dim": 16}
