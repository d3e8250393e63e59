"""Reduced from the patterns of course solutions for a transformer from scratch: modules
typed with jaxtyping, einops for every contraction, adapters that call the modules."""

from __future__ import annotations

import math

import torch
from einops import einsum, rearrange, reduce
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight: Float[Tensor, "d_out d_in"] = nn.Parameter(torch.empty(out_features, in_features))

    def forward(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... d_out"]:
        return einsum(x, self.weight, "... d_in, d_out d_in -> ... d_out")


class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))

    def forward(self, token_ids: Int[Tensor, "..."]) -> Float[Tensor, "... d_model"]:
        return self.weight[token_ids]


class RMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        rms = torch.sqrt(reduce(x * x, "... d_model -> ... 1", "mean") + self.eps)
        return x / rms * self.weight


class RotaryPositionalEmbedding(nn.Module):
    def __init__(self, theta: float, d_k: int, max_seq_len: int) -> None:
        super().__init__()
        freqs = 1.0 / theta ** (torch.arange(0, d_k, 2).float() / d_k)
        angles = torch.outer(torch.arange(max_seq_len).float(), freqs)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(
        self, x: Float[Tensor, "... seq d_k"], token_positions: Int[Tensor, "... seq"]
    ) -> Float[Tensor, "... seq d_k"]:
        pairs = rearrange(x, "... seq (d_k2 two) -> ... seq d_k2 two", two=2)
        cos = self.cos[token_positions]
        sin = self.sin[token_positions]
        x1, x2 = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return rearrange(rotated, "... seq d_k2 two -> ... seq (d_k2 two)")

    def rotate(
        self, x: Float[Tensor, "... seq d_k"], rotation: Float[Tensor, "seq d_k2 2 2"]
    ) -> Float[Tensor, "... seq d_k"]:
        pairs = rearrange(x, "... seq (d_k2 two) -> ... seq d_k2 two", two=2)
        rotated = einsum(rotation, pairs, "seq d_k2 i j, ... seq d_k2 j -> ... seq d_k2 i")
        return rearrange(rotated, "... seq d_k2 i -> ... seq (d_k2 i)")


def softmax(x: Float[Tensor, "..."], dim: int) -> Float[Tensor, "..."]:
    shifted = x - x.max(dim=dim, keepdim=True).values
    exp = shifted.exp()
    return exp / exp.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(
    Q: Float[Tensor, "... queries d_k"],
    K: Float[Tensor, "... keys d_k"],
    V: Float[Tensor, "... keys d_v"],
    mask: Bool[Tensor, "... queries keys"] | None = None,
) -> Float[Tensor, "... queries d_v"]:
    scores = einsum(Q, K, "... q d, ... k d -> ... q k") / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    return einsum(weights, V, "... q k, ... k d -> ... q d")


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = Linear(d_model, d_model)
        self.k_proj = Linear(d_model, d_model)
        self.v_proj = Linear(d_model, d_model)
        self.output_proj = Linear(d_model, d_model)

    def forward(self, x: Float[Tensor, "... seq d_model"]) -> Float[Tensor, "... seq d_model"]:
        q = rearrange(self.q_proj(x), "... s (h d) -> ... h s d", h=self.num_heads)
        k = rearrange(self.k_proj(x), "... s (h d) -> ... h s d", h=self.num_heads)
        v = rearrange(self.v_proj(x), "... s (h d) -> ... h s d", h=self.num_heads)
        seq = x.shape[-2]
        causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
        out = scaled_dot_product_attention(q, k, v, causal)
        merged = rearrange(out, "... h s d -> ... s (h d)")
        result: Tensor = self.output_proj(merged)
        return result


def run_linear(
    d_in: int, d_out: int, weights: Float[Tensor, " d_out d_in"], in_features: Float[Tensor, " ... d_in"]
) -> Float[Tensor, " ... d_out"]:
    layer = Linear(d_in, d_out)
    layer.load_state_dict({"weight": weights})
    out: Tensor = layer(in_features)
    return out


def run_embedding(
    vocab_size: int, d_model: int, weights: Float[Tensor, " vocab_size d_model"], token_ids: Int[Tensor, " ..."]
) -> Float[Tensor, " ... d_model"]:
    layer = Embedding(vocab_size, d_model)
    layer.load_state_dict({"weight": weights})
    return layer(token_ids)


def run_flatten(x: Float[Tensor, " batch channels height width"]) -> Float[Tensor, " batch d_out"]:
    return rearrange(x, "b c h w -> b (c h w)")
