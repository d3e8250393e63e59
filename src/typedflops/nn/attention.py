"""Typed causal multi-head self-attention, with optional rotary position embeddings (RoPE).

Two kernels compute the same function:

- ``kernel="sdpa"`` calls ``F.scaled_dot_product_attention``: torch picks a fused kernel for
  the device (flash attention on a CPU; flash, memory-efficient or cuDNN on a GPU), and a
  dry run costs the kernel the device would pick. Its products are counted over the
  query-key pairs the kernel computes, P per batch entry and head: forward 2·b·h·P·(d_q + d_v)
  FLOPs, backward 2.5x that (the kernel recomputes the scores). On a GPU P is every pair,
  s², as FlopCounterMode and the papers' model FLOPs count it (the kernels skip the blocks
  past the diagonal); on a CPU, whole blocks of 512 keys up to each block of queries' last
  (every pair up to 512 positions, 5/8 of them at 2048).
  ``torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`` around the call (or the estimate)
  asks for the math path instead.
- ``kernel="einsum"`` writes the math out: the scores, the causal mask, softmax, dropout and
  the product with the values, as Megatron-LM computes them (each a kernel of its own).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from ..decorator import typed_flops
from ..einops.ops import einsum, rearrange
from ..errors import SpecError
from .layers import Device, TypedLayer
from .lecture import Linear

__all__ = ["Attention", "rotary_tables"]

Kernel = Literal["sdpa", "einsum"]


def rotary_tables(
    seq: int,
    d_head: int,
    base: float = 10000.0,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    """The cosines and sines of RoPE (Su et al. 2021) for positions ``0..seq-1``: two
    ``(seq, d_head // 2)`` tensors on ``device``; pair ``i`` turns at frequency
    ``base**(-2i/d_head)``.

    >>> cos, sin = rotary_tables(4, 8)
    >>> cos.shape, float(cos[0, 0]), float(sin[0, 0])
    (torch.Size([4, 4]), 1.0, 0.0)
    """
    if d_head % 2:
        raise SpecError.at("rotary_tables()", f"d_head={d_head} must be even (pairs of axes turn)")
    inverse = base ** (-torch.arange(0, d_head, 2, dtype=torch.float32, device=device) / d_head)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32, device=device), inverse)
    return angles.cos().to(dtype or torch.float32), angles.sin().to(dtype or torch.float32)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    # The two halves of the head axis form the pairs (GPT-NeoX and LLaMA implementations).
    first, second = x.chunk(2, dim=-1)
    return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)


class Attention(TypedLayer):
    """Causal self-attention with ``n_heads`` heads of width ``d_head`` over ``d_model``.

    ``qkv`` projects ``d_model -> 3 * n_heads * d_head`` and ``out`` projects back; with the
    usual ``d_head = d_model // n_heads`` its matmuls cost ``8*b*s*d_model**2`` forward and
    its attention ``4*b*s**2*d_model`` (Narayanan et al. 2021). ``rope=True`` turns queries
    and keys by their positions (RoPE); ``dropout`` applies to the attention weights
    (einsum kernel) or inside the kernel (sdpa).

    >>> attention = Attention(16, 2, kernel="einsum")
    >>> attention(torch.randn(3, 5, 16)).shape
    torch.Size([3, 5, 16])
    >>> attention.estimate(batch=3, seq=5).dims["d_head"]
    8
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int | None = None,
        *,
        bias: bool = False,
        rope: bool = False,
        rope_base: float = 10000.0,
        kernel: Kernel = "sdpa",
        dropout: float = 0.0,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if d_head is None:
            if d_model % n_heads:
                raise SpecError.at(
                    "Attention()",
                    f"d_model={d_model} is not a multiple of n_heads={n_heads}",
                    hint="give d_head",
                )
            d_head = d_model // n_heads
        if kernel not in ("sdpa", "einsum"):
            raise SpecError.at(
                "Attention()", f"kernel={kernel!r}", hint="choose 'sdpa' or 'einsum'"
            )
        if not 0.0 <= dropout < 1.0:
            raise SpecError.at("Attention()", f"dropout={dropout!r} is not a probability in [0, 1)")
        if rope and d_head % 2:
            raise SpecError.at("Attention()", f"RoPE needs an even d_head, got {d_head}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.rope, self.rope_base, self.kernel, self.dropout = rope, rope_base, kernel, dropout
        width = n_heads * d_head
        self.qkv = Linear(d_model, 3 * width, bias=bias, device=device, dtype=dtype)
        self.out = Linear(width, d_model, bias=bias, device=device, dtype=dtype)
        self.scale = 1.0 / math.sqrt(d_head)

    def typedflops_dims(self) -> Mapping[str, int]:
        return {"d_model": self.d_model, "n_heads": self.n_heads, "d_head": self.d_head}

    def typedflops_resized(
        self, dims: Mapping[str, int], dtype: torch.dtype | None = None
    ) -> Attention:
        return Attention(
            dims.get("d_model", self.d_model),
            dims.get("n_heads", self.n_heads),
            dims.get("d_head", self.d_head),
            bias=self.qkv.bias is not None,
            rope=self.rope,
            rope_base=self.rope_base,
            kernel=self.kernel,
            dropout=self.dropout,
            dtype=dtype or self.qkv.weight.dtype,
        )

    @typed_flops
    def forward(
        self, x: Float[Tensor, "*batch seq d_model"]
    ) -> Float[Tensor, "*batch seq d_model"]:
        """Attend over ``x`` (``(*batch, seq, d_model)``), each position to itself and the
        positions before it."""
        q, k, v = rearrange(
            self.qkv(x),
            "... seq (three n_heads d_head) -> three ... n_heads seq d_head",
            three=3,
            n_heads=self.n_heads,
        )
        if self.rope:
            cos, sin = rotary_tables(x.shape[-2], self.d_head, self.rope_base, x.dtype, x.device)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        dropout = self.dropout if self.training else 0.0
        if self.kernel == "sdpa":
            mixed = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        else:
            mixed = self._attend(q, k, v, dropout)
        out: Tensor = self.out(
            rearrange(mixed, "... n_heads seq d_head -> ... seq (n_heads d_head)")
        )
        return out

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, dropout: float) -> Tensor:
        scores = einsum(q, k, "... n_heads i d_head, ... n_heads j d_head -> ... n_heads i j")
        seq = q.shape[-2]
        future = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
        weights = (scores * self.scale).masked_fill(future, float("-inf")).softmax(dim=-1)
        if dropout:
            weights, _ = torch.native_dropout(weights, dropout, True)
        return einsum(weights, v, "... n_heads i j, ... n_heads j d_head -> ... n_heads i d_head")

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}, "
            f"rope={self.rope}, kernel={self.kernel!r}, dropout={self.dropout}"
        )
