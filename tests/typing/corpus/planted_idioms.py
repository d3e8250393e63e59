"""Planted bugs, held out: the idioms real code wraps its shapes in (a dtype imported under
another name, an alias of an annotation, typed pass-through decorators, a parameter
returned on a shortcut, names rebound between einops and torch.einsum). One bug per
``# PLANTED: <code> <fragment>`` line (see planted_structures.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeAlias, TypeVar

import torch
from einops import einsum, rearrange
from jaxtyping import Float as F
from jaxtyping import Int
from torch import Tensor

SIZES = {"b": 2, "a": 8, "n": 5, "m": 7, "d": 12, "h": 3, "e": 4, "v": 10, "M": 6, "N": 4, "P": 3}

Coords: TypeAlias = F[Tensor, "b a 3"]
Tokens = F[torch.Tensor, "b n d"]

P = ParamSpec("P")
R = TypeVar("R")
Fn = TypeVar("Fn")


def hook_point(fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def inner(*args: P.args, **kwargs: P.kwargs) -> R:
        return fn(*args, **kwargs)

    return inner


def typecheck(*, strict: bool = True) -> Callable[[Fn], Fn]:
    def decorate(fn: Fn) -> Fn:
        return fn

    return decorate


def bug_identity_shortcut(
    lhs: F[Tensor, "M N"], rhs: F[Tensor, "N P"], scale: float = 0.0
) -> F[Tensor, "M P"]:
    if scale == 0.0:
        return rhs  # PLANTED: dim-alias returns rhs, "N P", but is annotated "M P"
    return scale * lhs @ rhs


def bug_unchanged_query(
    q: F[Tensor, "b n d"], memory: F[Tensor, "b m d"], use_memory: bool = False
) -> F[Tensor, "b m d"]:
    if not use_memory:
        return q  # PLANTED: dim-alias returns q, "b n d", but is annotated "b m d"
    return memory


def bug_centre_alias(coords: Coords, weights: F[Tensor, "b n"]) -> Tensor:
    return einsum(coords, weights, "b a c, b a -> b c")  # PLANTED: dim-alias axis "a" is "a" in coords but "n" in weights


def bug_token_alias(tokens: Tokens) -> Tensor:
    return rearrange(tokens, "b (n two) -> b n two", two=2)  # PLANTED: shape the left side has 2 axes where tokens "b n d" has 3


@hook_point
def project(x: F[Tensor, "b n d"], w: F[Tensor, "d e"]) -> F[Tensor, "b n e"]:
    return einsum(x, w, "b n d, d e -> b n e")


def bug_hooked_swapped(x: F[Tensor, "b n d"], w: F[Tensor, "d e"]) -> Tensor:
    return project(w, x)  # PLANTED: shape project(): argument x is "d e" but its parameter is annotated "b n d"


@typecheck(strict=True)
def embed(ids: Int[Tensor, "b n"], table: F[Tensor, "v d"]) -> F[Tensor, "b n d"]:
    return table[ids]


def bug_embed_swapped(ids: Int[Tensor, "b n"], table: F[Tensor, "v d"]) -> Tensor:
    return embed(table.long(), ids.float())  # PLANTED: shape


def bug_heads_then_torch_einsum(
    x: F[Tensor, "b n d"], keys: F[Tensor, "b m d"]
) -> F[Tensor, "b h n m"]:
    q = rearrange(x, "b n (h e) -> b h n e", h=3)
    k = rearrange(keys, "b m (h e) -> b h m e", h=3)
    return torch.einsum("bhne,bhme->bhmn", q, k)  # PLANTED: dim-alias torch.einsum returns "b 3 m n" but bug_heads_then_torch_einsum() is annotated "b h n m"


def bug_unpacked_heads(qkv: F[Tensor, "3 b h n e"]) -> F[Tensor, "b h n n"]:
    q, k, v = qkv
    return torch.einsum("bhid,bhjd->bhij", q, k.transpose(-1, -2))  # PLANTED: dim-alias axis "d" is "e" in q but "n" in operand 2
