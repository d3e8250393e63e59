"""Planted bugs, held out: layers written the way SAELens, mamba_ssm and attention code in
the style of x-transformers and alphafold3-pytorch write them (weights annotated on the
class, ``forward`` with dims, names bound twice, ``torch.einsum`` with letter equations,
typed pass-through decorators). One bug per ``# PLANTED: <code> <fragment>`` line; the
``bug_*`` function after a class runs the bug in it (see planted_structures.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import torch
import torch.nn.functional as F
from einops import einsum, rearrange, reduce, repeat
from jaxtyping import Float, Int
from torch import Tensor, nn

SIZES = {
    "batch": 2,
    "pos": 5,
    "d_in": 6,
    "d_sae": 14,
    "b": 2,
    "n": 5,
    "m": 7,
    "dim": 12,
    "l": 9,
    "d": 4,
    "v": 10,
    "h": 3,
    "e": 8,
}

P = ParamSpec("P")
R = TypeVar("R")


def hooked(fn: Callable[P, R]) -> Callable[P, R]:
    """A pass-through decorator typed with ParamSpec (a hook point, a timer, a tracer)."""

    @functools.wraps(fn)
    def inner(*args: P.args, **kwargs: P.kwargs) -> R:
        return fn(*args, **kwargs)

    return inner


# -- SAELens style ---------------------------------------------------------------------------


class SparseAutoencoder(nn.Module):
    W_enc: Float[Tensor, "d_in d_sae"]
    W_dec: Float[Tensor, "d_sae d_in"]
    b_enc: Float[Tensor, "d_sae"]
    b_dec: Float[Tensor, "d_in"]

    def __init__(self, d_in: int = 6, d_sae: int = 14) -> None:
        super().__init__()
        self.W_enc = nn.Parameter(torch.randn(d_in, d_sae))
        self.W_dec = nn.Parameter(torch.randn(d_sae, d_in))
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.b_dec = nn.Parameter(torch.zeros(d_in))

    def encode(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... d_sae"]:
        centred = x - self.b_dec
        return F.relu(einsum(centred, self.W_enc, "... d_in, d_in d_sae -> ... d_sae") + self.b_enc)

    def decode(self, acts: Float[Tensor, "... d_sae"]) -> Float[Tensor, "... d_in"]:
        return einsum(acts, self.W_dec, "... d_sae, d_sae d_in -> ... d_in") + self.b_dec

    def forward(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... d_in"]:
        return self.decode(self.encode(x))


class TiedSparseAutoencoder(SparseAutoencoder):
    def decode(self, acts: Float[Tensor, "... d_sae"]) -> Float[Tensor, "... d_in"]:
        return einsum(acts, self.W_enc, "... d_sae, d_sae d_in -> ... d_in") + self.b_dec  # PLANTED: dim-alias axis "d_sae" is "d_sae" in acts but "d_in" in self.W_enc


def bug_tied_decode(x: Float[Tensor, "batch d_in"]) -> Tensor:
    return TiedSparseAutoencoder()(x)


def bug_feature_density(acts: Float[Tensor, "batch pos d_sae"]) -> Float[Tensor, "d_sae"]:
    fired = (acts > 0).float()
    fired = reduce(fired, "batch pos d_sae -> batch d_sae", "mean")
    return reduce(fired, "batch pos d_sae -> d_sae", "mean")  # PLANTED: shape the left side has 3 axes where fired "batch d_sae" has 2


def bug_reconstruction_loss(
    x: Float[Tensor, "batch pos d_in"], sae_out: Float[Tensor, "batch pos d_in"]
) -> Float[Tensor, "batch"]:
    per_token = reduce((x - sae_out) ** 2, "batch pos d_in -> batch pos", "sum")  # PLANTED: shape bug_reconstruction_loss() is annotated "batch": has 2 axes where the annotation has 1
    return per_token


def bug_toy_model_features(
    features: Float[Tensor, "batch d_sae"], W: Float[Tensor, "d_in d_sae"]
) -> Float[Tensor, "batch d_sae"]:
    hidden = einsum(features, W, "batch d_sae, d_in d_sae -> batch d_in")
    return einsum(hidden, W, "batch d_in, d_sae d_in -> batch d_sae")  # PLANTED: dim-alias axis "d_in" is "d_in" in hidden but "d_sae" in W


# -- attention in the style of x-transformers and alphafold3-pytorch ------------------------


class Attention(nn.Module):
    to_qkv: Float[Tensor, "dim three_inner"]
    to_out: Float[Tensor, "inner dim"]

    def __init__(self, dim: int = 12, heads: int = 3, dim_head: int = 5) -> None:
        super().__init__()
        self.heads = heads
        self.to_qkv = nn.Parameter(torch.randn(dim, 3 * heads * dim_head))
        self.to_out = nn.Parameter(torch.randn(heads * dim_head, dim))

    @hooked
    def attend(
        self, q: Float[Tensor, "b h i d"], k: Float[Tensor, "b h j d"], v: Float[Tensor, "b h j d"]
    ) -> Float[Tensor, "b h i d"]:
        sim = einsum(q, k, "b h i d, b h j d -> b h i j") * q.shape[-1] ** -0.5
        return einsum(sim.softmax(dim=-1), v, "b h i j, b h j d -> b h i d")

    def forward(self, x: Float[Tensor, "b n dim"]) -> Float[Tensor, "b n dim"]:
        qkv = einsum(x, self.to_qkv, "b n dim, dim three_inner -> b n three_inner")
        q, k, v = rearrange(qkv, "b n (three h d) -> three b h n d", three=3, h=self.heads)
        out = self.attend(q, k, v)
        out = rearrange(out, "b h n d -> b n (h d)")
        return einsum(out, self.to_out, "b n inner, dim inner -> b n dim")  # PLANTED: dim-alias einsum returns "b n inner" but forward() is annotated "b n dim"


def bug_attention_out(x: Float[Tensor, "b n dim"]) -> Tensor:
    return Attention()(x)


def bug_scores_transposed(
    q: Float[Tensor, "b h n d"], k: Float[Tensor, "b h m d"]
) -> Float[Tensor, "b h n m"]:
    scores = einsum(q, k, "b h i d, b h j d -> b h j i")  # PLANTED: dim-alias einsum returns "b h m n" but bug_scores_transposed() is annotated "b h n m"
    return scores


def bug_mask_broadcast(
    sim: Float[Tensor, "b h n m"], mask: Int[Tensor, "b m"]
) -> Float[Tensor, "b h n m"]:
    mask = rearrange(mask, "b j -> b 1 j")
    return sim.masked_fill(rearrange(mask, "b 1 1 j -> b 1 1 j") == 0, -1e4)  # PLANTED: shape the left side has 4 axes where mask "b 1 m" has 3


def bug_relative_position(
    pos_emb: Float[Tensor, "n m d"], w: Float[Tensor, "d h"]
) -> Float[Tensor, "h n m"]:
    bias = einsum(pos_emb, w, "i j d, d h -> i j h")
    return rearrange(bias, "i j h -> h i j") + rearrange(bias, "i j h -> h j")  # PLANTED: pattern axis 'i' is on one side only


def bug_gated_out(
    x: Float[Tensor, "b n dim"], gates: Float[Tensor, "b n h"], out: Float[Tensor, "b h n d"]
) -> Tensor:
    gates = rearrange(gates, "b n h -> b h n 1")
    gated = out * gates.sigmoid()
    return rearrange(gated, "b h n d -> b n (h d)", h=3, d=4, n=5, b=2, dim=12)  # PLANTED: pattern axis 'dim' is given a length but is not in the pattern


def bug_expert_routing(
    x: Float[Tensor, "b n dim"], router: Float[Tensor, "dim e"]
) -> Float[Tensor, "b n e"]:
    logits = torch.einsum("bnd,de->bne", x, router)
    weights = logits.softmax(-1)
    return torch.einsum("bne,bnd->bne", weights)  # PLANTED: pattern the equation has 2 operands but 1 tensor was given


def bug_token_shift(x: Float[Tensor, "b n dim"]) -> Float[Tensor, "b n dim"]:
    shifted, rest = x.chunk(2, dim=-1)
    shifted = F.pad(shifted, (0, 0, 1, -1))
    return torch.cat((shifted, rest), dim=-2)  # PLANTED: shape


def bug_pool_queries(x: Float[Tensor, "b n dim"], queries: Float[Tensor, "m dim"]) -> Tensor:
    queries = repeat(queries, "m dim -> b m dim", b=x.shape[0])
    return torch.einsum("bmd,bdn->bmn", queries, x)  # PLANTED: dim-alias axis "d" is "dim" in queries but "n" in x


# -- mamba_ssm style (unannotated, rearrange and torch.einsum) ---------------------------------


class SelectiveScanStep(nn.Module):
    def __init__(self, d_inner: int = 12, d_state: int = 4, headdim: int = 4) -> None:
        super().__init__()
        self.headdim = headdim
        self.A_log = nn.Parameter(torch.zeros(d_inner // headdim))
        self.D = nn.Parameter(torch.ones(d_inner))

    def step(self, x: Tensor, dt: Tensor, B: Tensor, C: Tensor, state: Tensor) -> Tensor:
        x = rearrange(x, "b (h p) -> b h p", p=self.headdim)
        dA = torch.exp(dt * -torch.exp(self.A_log))
        dBx = torch.einsum("bh,bn,bhp->bhpn", dt, B, x)
        state = state * rearrange(dA, "b h -> b h 1 1") + dBx
        y = torch.einsum("bhpn,bn->bhp", state, C)
        y = y + rearrange(self.D, "(h p) -> h p", p=self.headdim) * x
        return rearrange(y, "b h p -> b (h p) n")  # PLANTED: pattern axis 'n' is on one side only


def bug_scan_step() -> Tensor:
    step = SelectiveScanStep()
    state = torch.zeros(2, 3, 4, 4)
    return step.step(torch.randn(2, 12), torch.rand(2, 3), torch.randn(2, 4), torch.randn(2, 4), state)


def bug_conv_state() -> Tensor:
    xBC, conv_weight = torch.randn(2, 9, 12), torch.randn(12, 1, 4)
    xBC = rearrange(xBC, "b l d -> b d l")
    return torch.einsum("bdl,dw->bdw", xBC, rearrange(conv_weight, "d 1 w -> d w"), xBC)  # PLANTED: pattern the equation has 2 operands but 3 tensors were given


def bug_ssd_chunk() -> Tensor:
    x = torch.randn(2, 9, 3, 4)
    return rearrange(x, "b (c l) h p -> b c l h p")  # PLANTED: pattern cannot infer the sizes of c, l


def bug_out_proj() -> Tensor:
    y, z = torch.randn(2, 9, 3, 4), torch.randn(2, 9, 3, 4)
    y = y * F.silu(z)
    return rearrange(y, "b l h p -> b l (h p")  # PLANTED: pattern Imbalanced parentheses


def bug_dt_bias() -> Tensor:
    dt, dt_bias = torch.rand(2, 9, 3), torch.rand(3)
    return torch.einsum("blh,h->blhh", dt, dt_bias)  # PLANTED: pattern output subscript 'h' appears more than once


def bug_group_heads(ngroups: int = 2) -> Tensor:
    B = torch.randn(2, 9, 8)
    B = rearrange(B, "b l (g n) -> b l g n", g=ngroups)
    return repeat(B, "b l g n -> b l (g r) n")  # PLANTED: pattern new axis 'r' needs a length


# -- a vocabulary head over an annotated module call ----------------------------------------


class Unembed(nn.Module):
    W_U: Float[Tensor, "dim v"]

    def __init__(self, dim: int = 12, vocab: int = 10) -> None:
        super().__init__()
        self.W_U = nn.Parameter(torch.randn(dim, vocab))

    def forward(self, resid: Float[Tensor, "b n dim"]) -> Float[Tensor, "b n v"]:
        return einsum(resid, self.W_U, "b n dim, dim v -> b n v")


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.unembed = Unembed()

    def forward(self, resid: Float[Tensor, "b n dim"], token: Int[Tensor, "b n"]) -> Tensor:
        pooled = reduce(resid, "b n dim -> b dim", "mean")
        return self.unembed(pooled)  # PLANTED: shape Unembed.forward(): argument resid is "b dim" but its parameter is annotated "b n dim"


def bug_unembed_pooled(resid: Float[Tensor, "b n dim"], token: Int[Tensor, "b n"]) -> Tensor:
    return Model()(resid, token)
