"""The FLOP rules of interpolation (``F.interpolate``'s linear modes, ``F.grid_sample``) and
of pairwise distances (``torch.cdist``, ``F.pdist``); the conventions they follow are written in
:mod:`.rules`.

Interpolation is a weighted sum of taps, nested axis by axis as torch's kernels compute it:
with K taps per axis (2 linear, 4 cubic) over d axes, each output element costs
``f(d) = K·f(d-1) + K + (K-1)`` (a multiply per tap, the adds between them): linear 3,
bilinear 9, trilinear 21, bicubic 35. The backward adds each gradient value, times the
product of its d weights, into each of the K^d inputs it came from: ``K^d·(d + 1)`` per
gradient value (bilinear 12). The weights themselves depend on positions only (once per
row or column, or per output element in some kernels) and are not counted. Antialiased
resizing (``antialias=True``) has as many taps as the scale asks, clipped at the edges
output by output: no formula in the sizes holds, and it is listed as uncounted.

``grid_sample`` per output position: each of its d grid coordinates is unnormalised (3:
an add, a multiply, a divide), clipped for ``border`` padding (2) or reflected and clipped
for ``reflection`` (6); bilinear then takes the floor and the far corner (2 per coordinate)
and the 2^d corner weights, each a product of d differences (``2^d·(2d - 1)``); nearest
rounds (1 per coordinate); bicubic takes the floor and the offset (2) and four cubic
coefficients (25 per coordinate). Per channel of each position, the weighted sum of the taps:
bilinear ``2^(d+1) - 1``, nearest 0, bicubic 35. Its backward recomputes the positions'
work; per channel, the input's gradient adds each tap's share (bilinear 2 per tap, nearest
1, bicubic 3) and the grid's gradient sums each tap's value times its weight's derivative
and the gradient (bilinear ``d + 1`` per tap and coordinate, bicubic 4), then scales it back
(d per position).

``affine_grid`` (``affine_grid_generator``): the base grid's coordinates along each spatial
axis of size n > 1 scaled by (n - 1)/n unless ``align_corners`` (a multiply and a divide
each), then each of the S positions' d + 1 homogeneous coordinates times the d-by-(d + 1)
matrix, a batched product: ``2·N·S·(d + 1)·d``. Its backward runs as ops of its own.

``cdist`` between M-vectors, per pair: a subtract, an absolute value, a power (p not 1 or
∞; a multiply for p = 2) and an add per coordinate, then the p-th root (p not 0, 1 or ∞):
p = 2 is ``4·M + 1``, p = 1 ``3·M``. Its backward, per pair and coordinate, the derivative
times the pair's gradient added into the first input's gradient: p = 1 4 (subtract, sign,
multiply, add), p = 2 4 (subtract, multiply, divide by the distance, add), p = ∞ 6, other p
7 and a power per pair; p = 0 has no gradient. For p = 2 on more than 25 rows, torch
computes through a matrix product (``_euclidean_dist``): the squared norms (2 per value),
``-2·x1`` (1 per value of x1), the product over M + 2 columns and a clamp and a square root
per pair; its backward is composed of other ops, counted as they run.

Matrix products (the ``matmul`` term of a Cost, :func:`sampling_matmul_parts`):
``_euclidean_dist``'s product over M + 2 columns, ``2·(M + 2)`` per pair, is a matrix
product inside the kernel (``x1_ @ x2_.mT``); its norms, clamp and root are not, and its
backward's products run as ``bmm`` ops of their own. ``_cdist_forward`` and
``_cdist_backward`` compute each pair directly, with no matrix product: none of them.

``pdist`` (``_pdist_forward``: the n·(n - 1)/2 pairs of distinct rows of an n-by-M input)
runs ``cdist``'s per-pair arithmetic: ``4·M + 1`` a pair for p = 2 and other p, ``3·M`` for
p = 0, 1, ∞. Its backward (``_pdist_backward``) computes each pair's derivative once and adds
it into the first row's gradient and subtracts it from the second's: ``cdist``'s backward and
a subtract more per pair and coordinate (p = 1, 2: 5; ∞: 7; other p: 8 and a power per
pair; p = 0 fills zeros, 0). Neither runs a matrix product.
``affine_grid_generator``'s product is one too (``base_grid.bmm(theta.mT)``).
Interpolation and ``grid_sample`` are weighted sums, not matrix products.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .opcall import OpCall, Rule
from .tensors import is_float, numel

__all__ = ["READ_NUMBERS", "sampling_matmul_parts", "sampling_rules"]

aten = torch.ops.aten


def _nested_taps(taps: int, axes: int) -> int:
    """FLOPs of one output of a K-tap interpolation nested over ``axes`` axes."""
    count = 0
    for _ in range(axes):
        count = taps * count + 2 * taps - 1
    return count


def _interpolate(taps: int, axes: int) -> Rule:
    def rule(call: OpCall) -> Any:
        x = call.inputs[0]
        return _nested_taps(taps, axes) * numel(call.output) if is_float(x) else 0

    return rule


def _interpolate_backward(taps: int, axes: int) -> Rule:
    def rule(call: OpCall) -> Any:
        grad = call.inputs[0]
        return taps**axes * (axes + 1) * numel(grad) if is_float(grad) else 0

    return rule


_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_BORDER, _REFLECTION = 1, 2


def _grid_position(mode: int, padding: int, axes: int) -> int:
    """FLOPs per output position of a grid sample: its coordinates and weights."""
    per_coordinate = 3 + (2 if padding == _BORDER else 6 if padding == _REFLECTION else 0)
    if mode == _NEAREST:
        return axes * (per_coordinate + 1)
    if mode == _BICUBIC:
        return axes * (per_coordinate + 2 + 25)
    return axes * (per_coordinate + 2) + (1 << axes) * (2 * axes - 1)


def _grid_channel(mode: int, axes: int) -> int:
    """FLOPs per channel of each output position: the weighted sum of the taps."""
    if mode == _NEAREST:
        return 0
    if mode == _BICUBIC:
        return _nested_taps(4, axes)
    return (2 << axes) - 1


def _grid_shape(call: OpCall, at: int) -> tuple[Any, Any, int]:
    """Output positions, channels and axes of a grid sample (``at``: the input's index)."""
    x, grid = call.inputs[at], call.inputs[at + 1]
    axes = len(grid.shape) - 2
    positions = math.prod(grid.shape[:-1])
    return positions, x.shape[1], axes


def _grid_sample(call: OpCall) -> Any:
    if not is_float(call.inputs[0]):
        return 0
    positions, channels, axes = _grid_shape(call, 0)
    mode, padding = call.arg(2, "interpolation_mode"), call.arg(3, "padding_mode")
    per_position = _grid_position(mode, padding, axes) + channels * _grid_channel(mode, axes)
    return positions * per_position


def _grid_sample_backward(call: OpCall) -> Any:
    if not is_float(call.inputs[0]):
        return 0
    positions, channels, axes = _grid_shape(call, 1)
    mode, padding = call.arg(3, "interpolation_mode"), call.arg(4, "padding_mode")
    mask = tuple(call.arg(6, "output_mask", (True, True)))
    taps = 4**axes if mode == _BICUBIC else 2**axes
    per_channel = 0
    per_position = _grid_position(mode, padding, axes)
    if mask[0]:
        per_channel += 1 if mode == _NEAREST else taps * (3 if mode == _BICUBIC else 2)
    if mask[1] and mode != _NEAREST:
        per_channel += taps * axes * (4 if mode == _BICUBIC else axes + 1)
        per_position += axes
    return positions * (per_position + channels * per_channel)


def _cdist(call: OpCall) -> Any:
    if not is_float(call.inputs[0]):
        return 0
    pairs = numel(call.output)
    length = call.inputs[0].shape[-1]
    p = float(call.arg(2, "p"))
    if p in (0.0, 1.0, math.inf):
        return 3 * length * pairs
    return (4 * length + 1) * pairs


def _cdist_backward(call: OpCall) -> Any:
    grad = call.inputs[0]
    if not is_float(grad):
        return 0
    length = call.inputs[1].shape[-1]  # (grad, x1, x2, p, cdist)
    pairs = numel(grad)
    p = float(call.arg(3, "p"))
    if p == 0.0:
        return 0
    if p in (1.0, 2.0):
        return 4 * length * pairs
    if p == math.inf:
        return 6 * length * pairs
    return (7 * length + 1) * pairs


def _pairs(x: Any) -> Any:
    """The n·(n - 1)/2 pairs of distinct rows of an n-by-M input, from its rows."""
    rows = x.shape[0]
    return rows * (rows - 1) // 2 if isinstance(rows, int) else rows * (rows - 1) / 2


def _pdist(call: OpCall) -> Any:
    x = call.inputs[0]
    if not is_float(x):
        return 0
    pairs, length = _pairs(x), x.shape[-1]
    p = float(call.arg(1, "p", 2.0))
    if p in (0.0, 1.0, math.inf):
        return 3 * length * pairs
    return (4 * length + 1) * pairs


def _pdist_backward(call: OpCall) -> Any:
    grad = call.inputs[0]  # (grad, self, p, pdist)
    if not is_float(grad):
        return 0
    length = call.inputs[1].shape[-1]
    pairs = _pairs(call.inputs[1])
    p = float(call.arg(2, "p"))
    if p == 0.0:
        return 0
    if p in (1.0, 2.0):
        return 5 * length * pairs
    if p == math.inf:
        return 7 * length * pairs
    return (8 * length + 1) * pairs


def _euclidean_dist(call: OpCall) -> Any:
    x1, x2 = call.inputs[0], call.inputs[1]
    if not is_float(x1):
        return 0
    pairs = numel(call.output)
    return 3 * numel(x1) + 2 * numel(x2) + _euclidean_product(call) + 2 * pairs


def _euclidean_product(call: OpCall) -> Any:
    """``_euclidean_dist``'s matrix product: ``[-2·x1, |x1|², 1] @ [x2, 1, |x2|²]ᵀ``."""
    x1 = call.inputs[0]
    if not is_float(x1):
        return 0
    return 2 * numel(call.output) * (x1.shape[-1] + 2)


def _affine_grid(call: OpCall) -> Any:
    theta = call.inputs[0]
    if not is_float(theta):
        return 0
    spatial = [int(n) for n in call.arg(1, "size")[2:]]
    scaled = 0 if call.arg(2, "align_corners") else sum(2 * n for n in spatial if n > 1)
    return scaled + _affine_grid_product(call)


def _affine_grid_product(call: OpCall) -> Any:
    theta = call.inputs[0]
    if not is_float(theta):
        return 0
    size = [int(n) for n in call.arg(1, "size")]
    axes = len(size) - 2
    return 2 * size[0] * math.prod(size[2:]) * (axes + 1) * axes


#: The numbers (not tensors, not sizes) a rule reads, by op: its count depends on them.
READ_NUMBERS: dict[Any, tuple[str, ...]] = {
    aten._cdist_forward: ("p",),
    aten._cdist_backward: ("p",),
    aten._pdist_forward: ("p",),
    aten._pdist_backward: ("p",),
}


def sampling_rules() -> dict[Any, Rule]:
    """The rules of this module, by the op each counts."""
    rules: dict[Any, Rule] = {
        aten.upsample_linear1d: _interpolate(2, 1),
        aten.upsample_bilinear2d: _interpolate(2, 2),
        aten.upsample_trilinear3d: _interpolate(2, 3),
        aten.upsample_bicubic2d: _interpolate(4, 2),
        aten.upsample_linear1d_backward: _interpolate_backward(2, 1),
        aten.upsample_bilinear2d_backward: _interpolate_backward(2, 2),
        aten.upsample_trilinear3d_backward: _interpolate_backward(2, 3),
        aten.upsample_bicubic2d_backward: _interpolate_backward(4, 2),
        aten.grid_sampler_2d: _grid_sample,
        aten.grid_sampler_3d: _grid_sample,
        aten.grid_sampler_2d_backward: _grid_sample_backward,
        aten.grid_sampler_3d_backward: _grid_sample_backward,
        aten._cdist_forward: _cdist,
        aten._cdist_backward: _cdist_backward,
        aten._pdist_forward: _pdist,
        aten._pdist_backward: _pdist_backward,
        aten._euclidean_dist: _euclidean_dist,
        aten.affine_grid_generator: _affine_grid,
    }
    return rules


def sampling_matmul_parts() -> dict[Any, Rule]:
    """The matrix products' part of the rules of this module, by the op it counts (the
    others have none)."""
    return {
        aten._euclidean_dist: _euclidean_product,
        aten.affine_grid_generator: _affine_grid_product,
    }
