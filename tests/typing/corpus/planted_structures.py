"""Planted bugs, held out: structure-prediction and linear-algebra code written the way
chai_lab, alphafold3-pytorch and linear_operator write it (``@typecheck`` on annotated
functions, ``"b n d"`` dims, ``*batch`` matrices, einops and raw torch mixed, names bound
twice). One bug per ``# PLANTED: <code> <fragment>`` line; each ``bug_*`` function runs
it (tests/typing/test_planted_runs.py checks that each fails at run time, with the sizes
in ``SIZES``). tests/typing/test_real_code.py counts how many typedflops' set-up catches.
"""

from __future__ import annotations

import math
import typing

import torch
import torch.nn.functional as F
from einops import einsum, pack, rearrange, reduce, repeat, unpack
from jaxtyping import Bool, Float, Int
from torch import Tensor

SIZES = {
    "b": 2,
    "n": 5,
    "m": 7,
    "a": 8,
    "d": 12,
    "h": 3,
    "k": 11,
    "c": 6,
    "r": 9,
    "batch": (2,),
    "N": 4,
    "M": 6,
    "P": 3,
}

Func = typing.TypeVar("Func")


def typecheck(cls_or_func: Func) -> Func:
    return cls_or_func


# -- chai_lab style ------------------------------------------------------------------------


@typecheck
def calc_centroid(coords: Float[Tensor, "b a 3"], mask: Bool[Tensor, "b a"]) -> Float[Tensor, "b 3"]:
    weights = mask.to(coords.dtype)
    weights = weights / reduce(weights, "b a -> b 1", "sum").clamp(min=1e-4)
    return reduce(coords * weights[:, :, None], "b a c -> b c", "sum")


@typecheck
def bug_center(coords: Float[Tensor, "b a 3"], mask: Bool[Tensor, "b a"]) -> Float[Tensor, "b a 3"]:
    centroid = calc_centroid(mask, coords)  # PLANTED: shape calc_centroid(): argument coords is "b a" but its parameter is annotated "b a 3"
    return coords - rearrange(centroid, "b c -> b 1 c")


@typecheck
def bug_centroid_broadcast(coords: Float[Tensor, "b a 3"], mask: Bool[Tensor, "b a"]) -> Float[Tensor, "b a 3"]:
    centroid = calc_centroid(coords, mask)
    centroid = rearrange(centroid, "b c -> b c 1")
    return coords - rearrange(centroid, "b c one -> b one c a")  # PLANTED: pattern axis 'a' is on one side only


@typecheck
def bug_pair_mask(single_mask: Bool[Tensor, "b n"]) -> Bool[Tensor, "b n n"]:
    pair = einsum(single_mask.float(), single_mask.float(), "b i, b j -> b i j")
    return rearrange(pair > 0, "b i j -> b (i j)")  # PLANTED: shape bug_pair_mask() is annotated "b n n": has 2 axes where the annotation has 3


@typecheck
def bug_distances(coords: Float[Tensor, "b a 3"]) -> Float[Tensor, "b a a"]:
    diff = rearrange(coords, "b i c -> b i 1 c") - rearrange(coords, "b j c -> b 1 j c")
    return reduce(diff**2, "b i j c -> b i j", "summ").sqrt()  # PLANTED: pattern unknown reduction 'summ'


@typecheck
def bug_token_features(
    token_single: Float[Tensor, "b n d"], token_pair: Float[Tensor, "b n n c"]
) -> Float[Tensor, "b n n c"]:
    outer = einsum(token_single, token_single, "b i d, b j d -> b i j")
    outer = rearrange(outer, "b i j -> b i j 1")
    return token_pair + repeat(outer, "b i j 1 -> b i j c")  # PLANTED: pattern new axis 'c' needs a length


@typecheck
def bug_atom_to_token(
    atom_feats: Float[Tensor, "b a d"], atom_token_index: Int[Tensor, "b a"], n_tokens: int = 5
) -> Float[Tensor, "b n d"]:
    one_hot = F.one_hot(atom_token_index, n_tokens).float()
    summed = einsum(one_hot, atom_feats, "b a n, b a d -> b n d")
    counts = reduce(one_hot, "b a n -> b n", "sum")
    return summed / rearrange(counts, "b n -> b n")  # PLANTED: shape returns "b n" but bug_atom_to_token() is annotated "b n d"


@typecheck
def bug_msa_outer(msa: Float[Tensor, "b m n c"]) -> Float[Tensor, "b n n c"]:
    outer = einsum(msa, msa, "b s i c, b s j d -> b i j c d")
    outer = reduce(outer, "b i j c d -> b i j c", "mean")
    return einsum(outer, msa, "b i j c -> b i j c")  # PLANTED: pattern the pattern has 1 operand but 2 tensors were given


@typecheck
def bug_rotate(coords: Float[Tensor, "b a 3"], rotations: Float[Tensor, "b 3 3"]) -> Float[Tensor, "b a 3"]:
    return einsum(coords, rotations, "b a i, b j i -> b a j k")  # PLANTED: pattern axis 'k' is on the right but in no operand


@typecheck
def bug_template_pair(
    pair: Float[Tensor, "b n n c"], template: Float[Tensor, "b r n n d"], w: Float[Tensor, "d c"]
) -> Float[Tensor, "b n n c"]:
    projected = einsum(template, w, "b t i j d, d c -> b t i j c")
    projected = reduce(projected, "b t i j c -> b i j c", "mean")
    return pair + einsum(projected, w, "b i j c, c d -> b i j d")  # PLANTED: dim-alias axis "c" is "c" in projected but "d" in w


# -- alphafold3-pytorch style (einops-heavy helpers) ---------------------------------------


def bug_pad_and_window(t: Float[Tensor, "b n d"], window_size: int = 5) -> Tensor:
    t = F.pad(t, (0, 0, 0, 0))
    return rearrange(t, "b (n w) d -> b n w d", w=window_size, d=12, extra=3)  # PLANTED: pattern axis 'extra' is given a length but is not in the pattern


def bug_full_pairwise(t: Float[Tensor, "b n d"]) -> Tensor:
    return repeat(t, "b i d -> b i j d")  # PLANTED: pattern new axis 'j' needs a length


def bug_lens_to_mask(lens: Int[Tensor, "b"], max_len: int = 5) -> Bool[Tensor, "b n"]:
    arange = torch.arange(max_len)
    return rearrange(arange, "n -> 1 n") < rearrange(lens, "b 1 -> b")  # PLANTED: shape the left side has 2 axes where lens "b" has 1


def bug_mean_pool(feats: Float[Tensor, "b m d"], mask: Bool[Tensor, "b m"]) -> Float[Tensor, "b d"]:
    feats = feats.masked_fill(~rearrange(mask, "b m -> b m 1"), 0.0)
    summed = reduce(feats, "b m d -> b d", "sum")
    count = reduce(mask.float(), "b m -> b", "sum")
    return summed / rearrange(count, "b, -> b 1")  # PLANTED: pattern separated with spaces, not commas


def bug_distogram(pairwise: Float[Tensor, "b n n c"], w: Float[Tensor, "c k"]) -> Tensor:
    symmetrized = pairwise + rearrange(pairwise, "b i j c -> b j i c")
    logits = einsum(symmetrized, w, "b i j c, c k -> b i j k")
    return rearrange(logits, "b i j k -> b k i j j")  # PLANTED: pattern duplicate dimension


# -- linear_operator style (*batch matrices, unions, rebinding) ----------------------------


def solve(
    rhs: typing.Union[Float[Tensor, "*batch N P"], Float[Tensor, "*batch N"]],
) -> typing.Union[Float[Tensor, "*batch N P"], Float[Tensor, "*batch N"]]:
    return rhs


def bug_solve_scalar(rhs: Float[Tensor, ""]) -> Tensor:
    return solve(rhs)  # PLANTED: shape solve(): argument rhs is "" but its parameter is annotated


def matmul(
    lhs: Float[Tensor, "*batch M N"], rhs: Float[Tensor, "*batch N P"]
) -> Float[Tensor, "*batch M P"]:
    return lhs @ rhs


def bug_matmul_swapped(lhs: Float[Tensor, "*batch M N"], rhs: Float[Tensor, "*batch N P"]) -> Tensor:
    return matmul(rhs, lhs)  # PLANTED: dim-alias matmul(): dim "N" is "P" in argument lhs but "M" in argument rhs


def bug_inv_quad(
    matrix: Float[Tensor, "*batch N N"], rhs: Float[Tensor, "*batch N P"]
) -> Float[Tensor, "*batch P"]:
    solved = torch.linalg.solve(matrix, rhs)
    solved = einsum(solved, rhs, "... n p, ... n p -> ... p")
    return rearrange(solved, "... p -> ... p 1")  # PLANTED: shape returns "*batch P 1" but bug_inv_quad() is annotated "*batch P"


def bug_diag_times(
    diag: Float[Tensor, "*batch N"], rhs: Float[Tensor, "*batch M P"]
) -> Float[Tensor, "*batch N P"]:
    return einsum(diag, rhs, "... n, ... n p -> ... n p")  # PLANTED: dim-alias axis "n" is "N" in diag but "M" in rhs


def bug_root_decomposition(
    root: Float[Tensor, "*batch N k"], rhs: Float[Tensor, "*batch N P"]
) -> Float[Tensor, "*batch N P"]:
    partial = einsum(root, rhs, "... n k, ... n p -> ... k p")
    return einsum(root, partial, "... n k, ... p k -> ... n p")  # PLANTED: dim-alias axis "k" is "k" in root but "P" in partial


def bug_kronecker(
    a: Float[Tensor, "*batch N N"], b: Float[Tensor, "*batch M M"]
) -> Float[Tensor, "*batch N*M N*M"]:
    outer = einsum(a, b, "... i j, ... k l -> ... i k j l")
    return rearrange(outer, "... i k j l -> ... (i k) (j l) 1")  # PLANTED: shape has 3 axes where the annotation has 2


def bug_pack_rows(
    first: Float[Tensor, "N P"], second: Float[Tensor, "M P"], w: Float[Tensor, "P k"]
) -> list[Tensor]:
    packed, shapes = pack([first, second], "* p")
    mixed = einsum(packed, w, "n p, q p -> n q")  # PLANTED: dim-alias axis "p" is "P" in packed but "k" in w
    return unpack(mixed, shapes, "* q")


def bug_log_det(matrix: Float[Tensor, "*batch N N"]) -> Float[Tensor, "*batch"]:
    chol = torch.linalg.cholesky(matrix @ matrix.mT + torch.eye(matrix.shape[-1]))
    diag = torch.diagonal(chol, dim1=-2, dim2=-1)
    return 2 * reduce(diag.log(), "... n m -> ...", "sum") + 0 * math.pi  # PLANTED: shape
