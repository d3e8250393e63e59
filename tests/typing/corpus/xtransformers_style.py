"""Reduced from the patterns of transformer libraries: helpers, buffers, config ints,
``**kwargs`` passed through, ``functools.partial``, flag-guarded Optionals."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from einops import einsum, pack, rearrange, reduce, repeat, unpack
from torch import Tensor, nn


def exists(val: Any) -> bool:
    return val is not None


def default(val: Any, d: Any) -> Any:
    return val if exists(val) else d


def l2norm(t: Tensor, groups: int = 1) -> Tensor:
    t = rearrange(t, "... (g d) -> ... g d", g=groups)
    t = F.normalize(t, p=2, dim=-1)
    return rearrange(t, "... g d -> ... (g d)")


@dataclass
class Config:
    dim: int = 64
    heads: int = 4
    num_mem_kv: int | None = None
    rotary_dim: int | None = 16


class RotaryEmbedding(nn.Module):
    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, t: Tensor) -> Tensor:
        freqs = einsum(t.float(), self.inv_freq, "i, j -> i j")
        return torch.cat((freqs, freqs), dim=-1)


class Attention(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.heads = config.heads
        self.to_qkv = nn.Linear(config.dim, config.dim * 3, bias=False)
        self.num_mem_kv = config.num_mem_kv
        self.mem_k = nn.Parameter(torch.randn(config.heads, config.num_mem_kv or 1, config.dim // config.heads))
        self.rel_pos: Tensor | None = None
        self.use_rel_pos = False

    def forward(self, x: Tensor, mask: Tensor | None = None, rotary: Tensor | None = None, **kwargs: Any) -> Tensor:
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = map(partial(rearrange, pattern="b n (h d) -> b h n d", h=self.heads), (q, k, v))
        if exists(self.num_mem_kv):
            mem = repeat(self.mem_k, "h n d -> b h n d", b=x.shape[0])
            k = torch.cat((mem, k), dim=-2)
        sim = einsum(q, k, "b h i d, b h j d -> b h i j")
        if self.use_rel_pos:
            sim = sim + rearrange(self.rel_pos, "i j -> 1 1 i j")
        if exists(mask):
            sim = sim.masked_fill(~rearrange(mask, "b j -> b 1 1 j"), -1e9)
        attn = sim.softmax(dim=-1)
        out = einsum(attn, v, "b h i j, b h j d -> b h i d")
        return rearrange(out, "b h n d -> b n (h d)")


class Block(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.attn = Attention(config)
        self.rotary = RotaryEmbedding(config.rotary_dim or 16)
        self.mem_len = config.num_mem_kv

    def forward(self, x: Tensor, **attn_kwargs: Any) -> Tensor:
        rotary = self.rotary(torch.arange(x.shape[1]))
        out: Tensor = self.attn(x, rotary=rotary, **attn_kwargs)
        return out + x

    def memories(self, x: Tensor) -> Tensor:
        return repeat(x, "b n d -> b m n d", m=self.mem_len)

    def reduce_with(self, x: Tensor, how: str = "mean") -> Tensor:
        return reduce(x, "b n d -> b d", how)

    def pack_cls(self, x: Tensor, cls: Tensor) -> Tensor:
        packed, ps = pack([cls, x], "b * d")
        cls_out, rest = unpack(packed, ps, "b * d")
        return cls_out + rest.mean(1)


def run(config: Config, x: Tensor) -> Tensor:
    block = Block(config)
    kwargs: dict[str, Any] = dict(mask=None)
    return block(x, **kwargs)
