"""nanoGPT's model (github.com/karpathy/nanoGPT, ``model.py``) as its users annotate it.

The structure follows that file: a ``GPTConfig`` dataclass handed to every module, modules
that keep a few of its fields (or none: ``MLP`` and ``Block`` keep nothing), a fused
``c_attn`` projection split into heads, SDPA attention or the masked product behind a
``flash`` switch, ``4 * n_embd`` hidden units, weight tying, a parameter count printed by
the constructor, and ``forward(idx, targets=None)`` that computes only the last position's
logits without targets. The annotations name the config's fields: ``n_embd`` for the
width, ``vocab_size`` for the logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.nn import functional as F

from typedflops import typed_flops


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class LayerNorm(nn.Module):
    """Layer norm whose bias can be switched off."""

    def __init__(self, ndim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, flash: bool = True) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = flash
        if not flash:
            mask = torch.tril(torch.ones(config.block_size, config.block_size))
            self.register_buffer("bias", mask.view(1, 1, config.block_size, config.block_size))

    @typed_flops
    def forward(self, x: Float[Tensor, "b t n_embd"]) -> Float[Tensor, "b t n_embd"]:
        B, T, C = x.size()
        heads = self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, heads, C // heads).transpose(1, 2)
        k = k.view(B, T, heads, C // heads).transpose(1, 2)
        v = v.view(B, T, heads, C // heads).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask: Tensor = self.get_buffer("bias")
            att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        out: Tensor = self.resid_dropout(self.c_proj(y))
        return out


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    @typed_flops
    def forward(self, x: Float[Tensor, "b t n_embd"]) -> Float[Tensor, "b t n_embd"]:
        out: Tensor = self.dropout(self.c_proj(self.gelu(self.c_fc(x))))
        return out


class Block(nn.Module):
    def __init__(self, config: GPTConfig, flash: bool = True) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config, flash)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    @typed_flops
    def forward(self, x: Float[Tensor, "b t n_embd"]) -> Float[Tensor, "b t n_embd"]:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig, flash: bool = True) -> None:
        super().__init__()
        self.config = config
        self.flash = flash
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(config.vocab_size, config.n_embd),
                "wpe": nn.Embedding(config.block_size, config.n_embd),
                "drop": nn.Dropout(config.dropout),
                "h": nn.ModuleList(Block(config, flash) for _ in range(config.n_layer)),
                "ln_f": LayerNorm(config.n_embd, bias=config.bias),
            }
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        cast(nn.Embedding, self.transformer["wte"]).weight = self.lm_head.weight  # tied
        for name, parameter in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(parameter, std=0.02 / math.sqrt(2 * config.n_layer))
        print(f"number of parameters: {sum(p.numel() for p in self.parameters()) / 1e6:.2f}M")

    @typed_flops
    def forward(
        self, idx: Int[Tensor, "b t"], targets: Int[Tensor, "b t"] | None = None
    ) -> tuple[Float[Tensor, "b _ vocab_size"], Float[Tensor, ""] | None]:
        t = idx.size(1)
        assert t <= self.config.block_size, f"sequence of {t} past block size"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        parts: Any = self.transformer
        x = parts.drop(parts.wte(idx) + parts.wpe(pos))
        for block in parts.h:
            x = block(x)
        x = parts.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        flat = logits.view(-1, logits.size(-1))
        return logits, F.cross_entropy(flat, targets.view(-1), ignore_index=-1)
