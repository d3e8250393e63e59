"""Models written the way course code and public repositories write them.

Plain ``nn.Module``s with ``"... d_model"`` annotations, einops and raw torch mixed, RoPE,
einsum attention and SDPA, SwiGLU, RMSNorm and LayerNorm, Optional arguments, tensors
created inside ``forward`` without ``device=``, integer token ids, and a small conv net.
Each ``forward`` carries ``@typed_flops``, as the import hook would put it there.
"""

from __future__ import annotations

import math

import torch
from einops import rearrange
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from typedflops import einsum, typed_flops


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        std = math.sqrt(2 / (in_features + out_features))
        nn.init.trunc_normal_(self.weight, std=std, a=-3 * std, b=3 * std)

    @typed_flops
    def forward(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... d_out"]:
        return einsum(x, self.weight, "... d_in, d_out d_in -> ... d_out")


class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim))

    @typed_flops
    def forward(self, token_ids: Int[Tensor, "..."]) -> Float[Tensor, "... d_model"]:
        return self.weight[token_ids]


class RMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    @typed_flops
    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        in_dtype = x.dtype
        x = x.to(torch.float32)
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x / rms * self.weight).to(in_dtype)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.d_ff = d_ff
        self.w1 = Linear(d_model, d_ff)
        self.w2 = Linear(d_ff, d_model)
        self.w3 = Linear(d_model, d_ff)

    @typed_flops
    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        gate = self.w1(x)
        return self.w2(gate * torch.sigmoid(gate) * self.w3(x))


class RotaryPositionalEmbedding(nn.Module):
    def __init__(self, theta: float, d_k: int, max_seq_len: int) -> None:
        super().__init__()
        freqs = 1.0 / theta ** (torch.arange(0, d_k, 2).float() / d_k)
        angles = torch.outer(torch.arange(max_seq_len).float(), freqs)
        self.cos: Tensor
        self.sin: Tensor
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    @typed_flops
    def forward(
        self, x: Float[Tensor, "... seq d_k"], token_positions: Int[Tensor, "... seq"]
    ) -> Float[Tensor, "... seq d_k"]:
        cos = self.cos[token_positions]
        sin = self.sin[token_positions]
        pairs = rearrange(x, "... seq (half two) -> ... seq half two", two=2)
        even, odd = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
        return rearrange(rotated, "... seq half two -> ... seq (half two)")


@typed_flops
def softmax(x: Float[Tensor, "..."], dim: int) -> Float[Tensor, "..."]:
    shifted = x - x.max(dim=dim, keepdim=True).values
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


@typed_flops
def attention(
    q: Float[Tensor, "... queries d_k"],
    k: Float[Tensor, "... keys d_k"],
    v: Float[Tensor, "... keys d_v"],
    mask: Bool[Tensor, "queries keys"] | None = None,
) -> Float[Tensor, "... queries d_v"]:
    scores = einsum(q, k, "... queries d_k, ... keys d_k -> ... queries keys")
    scores = scores / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return einsum(softmax(scores, dim=-1), v, "... queries keys, ... keys d_v -> ... queries d_v")


class MultiHeadSelfAttention(nn.Module):
    def __init__(
        self, d_model: int, num_heads: int, rope: RotaryPositionalEmbedding | None = None
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = Linear(d_model, d_model)
        self.k_proj = Linear(d_model, d_model)
        self.v_proj = Linear(d_model, d_model)
        self.output_proj = Linear(d_model, d_model)
        self.rope = rope

    @typed_flops
    def forward(
        self,
        x: Float[Tensor, "... seq d_model"],
        token_positions: Int[Tensor, "... seq"] | None = None,
    ) -> Float[Tensor, "... seq d_model"]:
        seq = x.shape[-2]
        q, k, v = (
            rearrange(proj(x), "... seq (h d) -> ... h seq d", h=self.num_heads)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        if self.rope is not None:
            if token_positions is None:
                token_positions = torch.arange(seq)
            q, k = self.rope(q, token_positions), self.rope(k, token_positions)
        causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
        out = attention(q, k, v, causal)
        merged: Tensor = rearrange(out, "... h seq d -> ... seq (h d)")
        return self.output_proj(merged)


class SdpaSelfAttention(nn.Module):
    """Attention through ``F.scaled_dot_product_attention`` with a fused qkv projection."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    @typed_flops
    def forward(self, x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq d_model"]:
        q, k, v = rearrange(
            self.qkv(x), "b s (three h d) -> three b h s d", three=3, h=self.num_heads
        )
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: Tensor = self.out(rearrange(y, "b h s d -> b s (h d)"))
        return out


class TransformerBlock(nn.Module):
    def __init__(
        self, d_model: int, num_heads: int, d_ff: int, rope: RotaryPositionalEmbedding | None
    ) -> None:
        super().__init__()
        self.ln1 = RMSNorm(d_model)
        self.attn = MultiHeadSelfAttention(d_model, num_heads, rope)
        self.ln2 = RMSNorm(d_model)
        self.ffn = SwiGLU(d_model, d_ff)

    @typed_flops
    def forward(self, x: Float[Tensor, "... seq d_model"]) -> Float[Tensor, "... seq d_model"]:
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        context_length: int,
        d_model: int,
        num_layers: int,
        num_heads: int,
        d_ff: int,
        rope_theta: float = 10000.0,
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.context_length = context_length
        self.d_model = d_model
        self.num_layers = num_layers
        self.d_ff = d_ff
        rope = RotaryPositionalEmbedding(rope_theta, d_model // num_heads, context_length)
        self.token_embeddings = Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, rope) for _ in range(num_layers)
        )
        self.ln_final = RMSNorm(d_model)
        self.lm_head = Linear(d_model, vocab_size)

    @typed_flops
    def forward(self, in_indices: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq vocab"]:
        x = self.token_embeddings(in_indices)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.ln_final(x))


class GptBlock(nn.Module):
    """A GPT-2 style block: LayerNorm, SDPA attention, GELU MLP (torch's own modules)."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = SdpaSelfAttention(d_model, num_heads)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    @typed_flops
    def forward(self, x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq d_model"]:
        x = x + self.attn(self.ln_1(x))
        mixed: Tensor = self.mlp(self.ln_2(x))
        return x + mixed


class SmallConvNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1)
        self.fc = nn.Linear(16 * 7 * 7, classes)

    @typed_flops
    def forward(self, x: Float[Tensor, "batch 1 28 28"]) -> Float[Tensor, "batch classes"]:
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        logits: Tensor = self.fc(x.flatten(1))
        return logits


class NanoGPT(nn.Module):
    """GPT as nanoGPT writes it: torch's modules, positions made in ``forward``, and
    ``forward(idx, targets=None)`` returning the logits and the loss (None without targets,
    when only the last position's logits are computed)."""

    def __init__(self, vocab_size: int, block_size: int, n_embd: int, n_layer: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(GptBlock(n_embd, num_heads=4) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying

    @typed_flops
    def forward(
        self, idx: Int[Tensor, "b t"], targets: Int[Tensor, "b t"] | None = None
    ) -> tuple[Float[Tensor, "b _ vocab"], Float[Tensor, ""] | None]:
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss
