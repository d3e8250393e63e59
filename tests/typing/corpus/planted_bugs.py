"""Realistic bugs, one per marked line (``# BUG: <code> <fragment>``): each must be caught
with typedflops' set-up, and nothing else may be added to this file."""

from __future__ import annotations

import torch
from einops import einsum, pack, rearrange, reduce, repeat, unpack
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import typed_flops


def patchify(img: Tensor) -> Tensor:
    return rearrange(img, "b 1 c h w")  # BUG: pattern needs exactly one '->'


def transposed_weight(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_out d_in"]
) -> Float[Tensor, "batch d_out"]:
    return einsum(x, w, "b i, i o -> b o")  # BUG: dim-alias axis "i" is "d_in" in x but "d_out" in w


def batched_projection(
    x: Float[Tensor, "batch seq d_model"], w: Float[Tensor, "d_ff d_model"]
) -> Float[Tensor, "batch seq d_ff"]:
    return einsum(x, w, "... d, d f -> ... f")  # BUG: dim-alias axis "d" is "d_model" in x but "d_ff" in w


def merge_heads(x: Float[Tensor, "b h n d"]) -> Float[Tensor, "b n h*d"]:
    return rearrange(x, "b h n d -> b h (n d)")  # BUG: dim-alias returns "b h d*n"


def pooled(x: Float[Tensor, "b n d"]) -> Tensor:
    return reduce(x, "b n d -> b d", "meen")  # BUG: pattern unknown reduction 'meen'


def tiled(x: Float[Tensor, "b d"]) -> Tensor:
    return repeat(x, "b d -> b r d")  # BUG: pattern new axis 'r' needs a length


def attention_scores(q: Float[Tensor, "b h i d"], k: Float[Tensor, "b h j d"]) -> Tensor:
    return einsum(q, "b h i d, b h j d -> b h i j")  # BUG: pattern has 2 operands but 1 tensor was given


def packed(x: Float[Tensor, "b n d"], cls: Float[Tensor, "b d"]) -> Tensor:
    out, _ = pack([cls, x], "b d")  # BUG: pattern needs one '*'
    return out


def unpacked(x: Float[Tensor, "b n d"], shapes: list[tuple[int, ...]]) -> list[Tensor]:
    return unpack(x, shapes, "b *")  # BUG: shape the pattern has 2 axes where x "b n d" has 3


class Projection:
    @classmethod
    def apply(cls, x: Float[Tensor, "n d_in"], w: Float[Tensor, "d_in d_out"]) -> Float[Tensor, "n d_out"]:
        return x @ w

    @staticmethod
    def project(x: Float[Tensor, "n d_in"], w: Float[Tensor, "d_in d_out"]) -> Float[Tensor, "n d_out"]:
        return x @ w


def swapped_classmethod(x: Float[Tensor, "b i"], w: Float[Tensor, "i o"]) -> Tensor:
    return Projection.apply(w, x)  # BUG: dim-alias Projection.apply()


def swapped_staticmethod(x: Float[Tensor, "b i"], w: Float[Tensor, "i o"]) -> Tensor:
    return Projection.project(w, x)  # BUG: dim-alias Projection.project()


class Head(nn.Module):
    def forward(self, x: Float[Tensor, "b s d"]) -> Float[Tensor, "b s"]:
        return x.sum(-1)


def wrong_rank_to_module(head: Head, x: Float[Tensor, "b d"]) -> None:
    head(x)  # BUG: shape argument x is "b d" but its parameter is annotated "b s d"


@typed_flops(flops="2*batch*d_in*d_ot")  # BUG: flops-expr names d_ot
def costed(x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]) -> Float[Tensor, "batch d_out"]:
    return x @ w


def rope_missing_split(
    x: Float[Tensor, "... seq d_k"], rotation: Float[Tensor, "seq d_k2 2 2"], pairs: Float[Tensor, "... seq d_k2 2"]
) -> Float[Tensor, "... seq d_k"]:
    rotated = einsum(rotation, pairs, "seq d_k2 i j, ... seq d_k2 j -> ... seq d_k2 i")
    return rearrange(rotated, "... seq d_k2 i -> ... seq (d_k2 i)")  # BUG: dim-alias "2*d_k2" where the annotation has "d_k"


def linear(x: Float[Tensor, "n d_in"], w: Float[Tensor, "d_in d_out"]) -> Float[Tensor, "n d_out"]:
    return x @ w


def first_layer(x: Float[Tensor, "n d"], w1: Float[Tensor, "d h"], w2: Float[Tensor, "h k"]) -> Tensor:
    return linear(x, w2)  # BUG: dim-alias dim "d_in" is "d" in argument x but "h" in argument w
