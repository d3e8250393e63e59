"""Reduced from the patterns of interpretability code typed with jaxtyping: parameters
annotated with dims, einops over Parameters and numpy arrays, reductions chosen by name."""

from __future__ import annotations

from typing import Literal

import einops
import numpy as np
import torch
import torch.nn as nn
from jaxtyping import Float, Int


class Attention(nn.Module):
    def __init__(self, n_heads: int, d_model: int, d_head: int) -> None:
        super().__init__()
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_K = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_V = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_O = nn.Parameter(torch.empty(n_heads, d_head, d_model))
        self.register_buffer("IGNORE", torch.tensor(-1e5))
        self.register_buffer("mask", torch.tril(torch.ones(8, 8)).bool())

    def forward(
        self, resid: Float[torch.Tensor, "batch pos d_model"]
    ) -> Float[torch.Tensor, "batch pos d_model"]:
        q = einops.einsum(
            resid, self.W_Q, "batch pos d_model, head_index d_model d_head -> batch pos head_index d_head"
        )
        k = einops.einsum(
            resid, self.W_K, "batch pos d_model, head_index d_model d_head -> batch pos head_index d_head"
        )
        v = einops.einsum(
            resid, self.W_V, "batch pos d_model, head_index d_model d_head -> batch pos head_index d_head"
        )
        scores = einops.einsum(
            q, k, "batch q_pos head_index d_head, batch k_pos head_index d_head -> batch head_index q_pos k_pos"
        )
        scores = scores.masked_fill(~self.mask[: scores.shape[-2], : scores.shape[-1]], -1e5)
        pattern = scores.softmax(dim=-1)
        z = einops.einsum(
            v, pattern, "batch k_pos head_index d_head, batch head_index q_pos k_pos -> batch q_pos head_index d_head"
        )
        result = einops.einsum(
            z, self.W_O, "batch pos head_index d_head, head_index d_head d_model -> batch pos d_model"
        )
        return result

    def ov_circuit(self) -> Float[torch.Tensor, "head_index d_model d_model"]:
        return einops.einsum(self.W_V, self.W_O, "h m d, h d n -> h m n")

    def flat_output_weight(self) -> nn.Parameter:
        w = einops.rearrange(self.W_O, "h d m -> h d m")
        return w


def flatten(acts: Float[torch.Tensor, "batch pos d_model"]) -> Float[torch.Tensor, "batch features"]:
    return einops.rearrange(acts, "batch pos d_model -> batch (pos d_model)")


def aggregate(
    acts: Float[torch.Tensor, "batch pos d_model"], how: Literal["mean", "sum", "max"] = "mean"
) -> Float[torch.Tensor, "batch d_model"]:
    reduction: str = how
    return einops.reduce(acts, "batch pos d_model -> batch d_model", reduction)


def numpy_stats(logits: np.ndarray) -> np.ndarray:
    return einops.reduce(logits, "batch pos vocab -> pos vocab", "mean")


def token_positions(tokens: Int[torch.Tensor, "batch pos"]) -> Int[torch.Tensor, "batch pos"]:
    positions = torch.arange(tokens.shape[1])
    return einops.repeat(positions, "pos -> batch pos", batch=tokens.shape[0])


def head_shapes(x: Float[torch.Tensor, "batch pos head_index d_head"]) -> dict[str, int]:
    return einops.parse_shape(x, "batch pos head_index d_head")
