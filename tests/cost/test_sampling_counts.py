"""Interpolation (``F.interpolate``'s linear and cubic modes, ``F.grid_sample``) and pairwise
distances (``torch.cdist``), forward and backward, held against hand counts on a real CPU run
(``record()``) and on meta (``estimate()``): one count for both.
"""

from __future__ import annotations

from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F
from jaxtyping import Float
from kernel_counts import Counts, flop_counter_total, on_cpu, on_meta
from torch import Tensor

import typedflops
from typedflops import record

IMAGE = Float[Tensor, "n c h w"]
VOLUME = Float[Tensor, "n c d h w"]
SIZES = {"n": 2, "c": 3, "d": 3, "h": 4, "w": 5, "l": 5}


def _up(mode: str, **options: Any) -> Any:
    return lambda x: F.interpolate(x, scale_factor=2, mode=mode, **options)


INTERPOLATION: list[tuple[str, Any, Any, int, int]] = [
    # nested taps: linear 2 products and an add (3), bilinear 2·3 + 3 = 9, trilinear 2·9 + 3
    # = 21, bicubic 4·7 + 7 = 35. Backward: each gradient value times the product of its d
    # weights, added into 2^d (bicubic 4^d) inputs: (d + 1)·2^d, bicubic 3·16
    ("linear", _up("linear"), Float[Tensor, "n c l"], 3 * 60, 4 * 60),
    ("bilinear", _up("bilinear"), IMAGE, 9 * 480, 12 * 480),
    ("bilinear-corners", _up("bilinear", align_corners=True), IMAGE, 9 * 480, 12 * 480),
    (
        "bilinear-down",
        lambda x: F.interpolate(x, size=(3, 2), mode="bilinear"),
        IMAGE,
        9 * 36,
        12 * 36,
    ),
    ("bicubic", _up("bicubic"), IMAGE, 35 * 480, 48 * 480),
    ("trilinear", _up("trilinear"), VOLUME, 21 * 2880, 32 * 2880),
]


@pytest.mark.parametrize(
    ("body", "annotation", "forward", "backward"),
    [case[1:] for case in INTERPOLATION],
    ids=[case[0] for case in INTERPOLATION],
)
def test_interpolation_is_a_weighted_sum_of_taps(
    body: Any, annotation: Any, forward: int, backward: int
) -> None:
    expected = Counts(forward, backward, ())
    assert on_cpu(body, [annotation], SIZES) == expected
    assert on_meta(body, [annotation], SIZES) == expected


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialiased_resizing_is_named_not_counted(mode: str) -> None:
    # its taps per output are clipped at the edges, output by output: no shape formula
    def body(x: Tensor) -> Tensor:
        return F.interpolate(x, size=(2, 3), mode=mode, antialias=True)

    for counts in (on_cpu(body, [IMAGE], SIZES), on_meta(body, [IMAGE], SIZES)):
        assert counts.forward == 0
        assert f"_upsample_{mode}2d_aa" in counts.uncounted


GRID = Float[Tensor, "n p q two"]
GRID_SIZES = {**SIZES, "p": 6, "q": 7, "two": 2, "r": 4, "three": 3}
POSITIONS = 2 * 6 * 7

GRID_CASES: list[tuple[str, dict[str, Any], int, int]] = [
    # per position: 2 coordinates unnormalised (3), floor and far corner (2), 4 corner
    # weights of 2 differences and a product (3): 22; per channel 4 products, 3 adds.
    # Backward: the positions again and the grid gradient's scale (2); per channel the
    # input's 4 taps (a product, an add) and the grid's 4 taps x 2 coordinates x 3
    ("bilinear", {}, POSITIONS * (22 + 3 * 7), POSITIONS * (24 + 3 * (8 + 24))),
    # nearest, border: unnormalise, clip (2), round per coordinate; backward an add per channel
    (
        "nearest-border",
        {"mode": "nearest", "padding_mode": "border"},
        POSITIONS * 2 * 6,
        POSITIONS * (2 * 6 + 3),
    ),
    # bicubic, reflection: unnormalise, reflect and clip (6), floor and offset (2), four cubic
    # coefficients (25) per coordinate; per channel 4 rows of 7 and a column of 7.
    # Backward per channel: 16 taps of 3 for the input, 16 x 2 coordinates of 4 for the grid
    (
        "bicubic-reflection",
        {"mode": "bicubic", "padding_mode": "reflection"},
        POSITIONS * (2 * 36 + 3 * 35),
        POSITIONS * (2 * 36 + 2 + 3 * (48 + 128)),
    ),
]


@pytest.mark.parametrize(
    ("options", "forward", "backward"),
    [case[1:] for case in GRID_CASES],
    ids=[case[0] for case in GRID_CASES],
)
def test_a_grid_sample_costs_its_positions_and_each_channels_taps(
    options: dict[str, Any], forward: int, backward: int
) -> None:
    def body(x: Tensor, grid: Tensor) -> Tensor:
        return F.grid_sample(x, grid, align_corners=False, **options)

    expected = Counts(forward, backward, ())
    assert on_cpu(body, [IMAGE, GRID], GRID_SIZES) == expected
    assert on_meta(body, [IMAGE, GRID], GRID_SIZES) == expected


def test_a_grid_sample_in_three_dimensions() -> None:
    # 1 x 2 x 3 x 4 grid positions (24) over 2 channels: per position 3 coordinates of 5
    # and 8 corner weights of 5 (55); per channel 8 products and 7 adds. Backward per
    # position 55 + 3, per channel 8 x 2 for the input and 8 x 3 x 4 for the grid
    def body(x: Tensor, grid: Tensor) -> Tensor:
        return F.grid_sample(x, grid, align_corners=True)

    sizes = {**GRID_SIZES, "n": 1, "c": 2}
    annotations = [VOLUME, Float[Tensor, "n p h r three"]]
    sizes["p"], sizes["h"] = 2, 3
    expected = Counts(24 * (55 + 2 * 15), 24 * (58 + 2 * (16 + 96)), ())
    assert on_cpu(body, annotations, sizes) == expected
    assert on_meta(body, annotations, sizes) == expected


X1, X2 = Float[Tensor, "b p m"], Float[Tensor, "b r m"]

CDIST: list[tuple[float, int, int]] = [
    # 2 x 5 x 6 = 60 pairs of 3-vectors. p = 2: subtract, abs, square, add per coordinate and
    # a root (13); backward per pair and coordinate, for each input: subtract, times the
    # gradient, over the distance, added (4)
    (2.0, 60 * 13, 2 * 60 * 4 * 3),
    (1.0, 60 * 9, 2 * 60 * 4 * 3),  # no power, no root; backward a sign for the divide
    (3.0, 60 * 13, 2 * 60 * (7 * 3 + 1)),  # backward |d|^(p-2)·d·grad/dist^(p-1)
    (float("inf"), 60 * 9, 2 * 60 * 6 * 3),  # a max for the add
]


@pytest.mark.parametrize(("p", "forward", "backward"), CDIST)
def test_cdist_costs_each_pair_and_coordinate(p: float, forward: int, backward: int) -> None:
    def body(x1: Tensor, x2: Tensor) -> Tensor:
        return torch.cdist(x1, x2, p=p)

    sizes = {"b": 2, "p": 5, "r": 6, "m": 3}
    expected = Counts(forward, backward, ())
    assert on_cpu(body, [X1, X2], sizes) == expected
    assert on_meta(body, [X1, X2], sizes) == expected


def test_cdist_through_a_matrix_product_counts_the_product_and_flop_counter_mode_does_not() -> None:
    # more than 25 rows: torch computes p = 2 as |x1|² - 2·x1·x2 + |x2|² (_euclidean_dist).
    # 2 x 30 x 26 = 1,560 pairs, m = 3: squared norms 2 per value of x1 (180) and x2 (156),
    # -2·x1 (180), the product over m + 2 = 5 columns, a clamp and a root per pair
    pairs = 2 * 30 * 26
    forward = 3 * 180 + 2 * 156 + pairs * (2 * 5 + 2)
    # backward (torch composes it): grad/dist, dist == 0, and two sums per pair; x·sum and
    # the subtract per value of each input; two products ratio @ x of 2·pairs·m
    products = 2 * (2 * pairs * 3)
    backward = 4 * pairs + 2 * (180 + 156) + products

    def body(x1: Tensor, x2: Tensor) -> Tensor:
        return torch.cdist(x1, x2)

    sizes = {"b": 2, "p": 30, "r": 26, "m": 3}
    expected = Counts(forward, backward, ())
    assert on_cpu(body, [X1, X2], sizes) == expected
    assert on_meta(body, [X1, X2], sizes) == expected
    x1 = torch.randn(2, 30, 3, requires_grad=True)
    x2 = torch.randn(2, 26, 3, requires_grad=True)
    assert flop_counter_total(lambda: torch.cdist(x1, x2)) == products  # its backward's bmm's
    # its matrix product is the matmul term's (the norms, the clamp and the root are not)
    with record() as rec:
        torch.cdist(x1, x2)
    assert (rec.total.flops, rec.total.matmul_flops) == (forward, pairs * 2 * 5)
    cost = typedflops.estimate(body, X1, X2, b=2, p=30, r=26, m=3)
    b, p, r, m = sympy.symbols("b p r m")
    assert (cost.matmul_flops, cost.matmul_formula) == (pairs * 2 * 5, 2 * b * p * r * (m + 2))
    assert cost.matmul.holds_at(cost.dims)


def test_cdist_pair_by_pair_runs_no_matrix_product() -> None:
    x1, x2 = torch.randn(2, 5, 3), torch.randn(2, 6, 3)
    for p in (1.0, 2.0, 3.0):
        with record() as rec:
            torch.cdist(x1, x2, p=p)
        assert rec.total.flops > 0 and rec.total.matmul_flops == 0


ROWS = Float[Tensor, "n m"]

PDIST: list[tuple[float, int, int]] = [
    # 6 rows of 3: 15 pairs. Forward as cdist's pairs: p = 2 subtract, abs, square, add per
    # coordinate and a root (13). Backward per pair and coordinate: the difference, the
    # derivative (times the gradient, over the distance), added to the first row's gradient
    # and subtracted from the second's (5)
    (2.0, 15 * 13, 15 * 5 * 3),
    (1.0, 15 * 9, 15 * 5 * 3),  # no power, no root; backward a sign for the divide
    (3.0, 15 * 13, 15 * (8 * 3 + 1)),  # backward |d|^(p-2)·d·grad/dist^(p-1), 8 and a power
    (float("inf"), 15 * 9, 15 * 7 * 3),  # a max for the add; backward 7
    (0.0, 15 * 9, 0),  # a count of the coordinates that differ; no gradient (zeros)
]


@pytest.mark.parametrize(("p", "forward", "backward"), PDIST)
def test_pdist_costs_each_pair_of_rows_and_coordinate(
    p: float, forward: int, backward: int
) -> None:
    def body(x: Tensor) -> Tensor:
        return F.pdist(x, p=p)

    sizes = {"n": 6, "m": 3}
    expected = Counts(forward, backward, ())
    assert on_cpu(body, [ROWS], sizes) == expected
    assert on_meta(body, [ROWS], sizes) == expected


def test_a_pdist_backward_that_ran_is_the_one_predicted_and_runs_no_matrix_product() -> None:
    # 5 rows of 3, p = 2: 10 pairs, 130 forward, 150 backward, the sum's 10 adds; no part of
    # it a matrix product; FlopCounterMode has no formula for either kernel
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    with record() as rec:
        F.pdist(x).sum().backward()
    total = rec.total
    assert (total.flops, total.backward_flops, total.matmul_flops, total.uncounted) == (
        140,
        150,
        0,
        (),
    )
    assert flop_counter_total(lambda: F.pdist(x)) == 0
