"""Adaptive pooling of n into o reads the elements of its windows
``[floor(i·n/o), ceil((i + 1)·n/o))``: n + o - gcd(n, o) an axis (each of the o - 1 inner
bounds that falls inside an element adds it to both windows). That count is no polynomial
in n: an estimate keeps it a number at its sizes, not exact, where the windows do not
tile the axis for every n, and is exact where they do (o = 1, or o fixed to n's divisor).

Hand counts (average: the reads and a divide per output): 15 x 15 into 7 x 7 reads
(15 + 7 - 1)² = 441 a map, with 49 divides: 6 maps (batch 2, 3 channels) 2,940 forward and
backward; 7 x 7 into 5 x 5 reads 11² = 121 a map (windows 2, 2, 3, 2, 2).
"""

from __future__ import annotations

import math

import pytest
import torch.nn.functional as F
from filled import ones
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import estimate, record


def _reads(n: int, o: int) -> int:
    """The windows' elements along an axis, window by window."""
    return sum(-(-(i + 1) * n // o) - i * n // o for i in range(o))


@pytest.mark.parametrize(("n", "o"), [(15, 7), (7, 5), (3, 6), (8, 3), (8, 12), (8, 2), (1, 4)])
def test_the_windows_read_n_plus_o_less_their_gcd(n: int, o: int) -> None:
    assert _reads(n, o) == n + o - math.gcd(n, o)
    x = ones(2, 3, n, n).requires_grad_()
    with record() as rec:
        F.adaptive_avg_pool2d(x, o)
    reads, outputs = 6 * _reads(n, o) ** 2, 6 * o * o
    assert (rec.total.flops, rec.total.backward_flops) == (reads + outputs, reads + outputs)


def test_an_estimate_keeps_a_count_no_polynomial_gives() -> None:
    pool = nn.AdaptiveAvgPool2d((7, 7))
    cost = estimate(pool, Float[Tensor, "b c h h"], b=2, c=3, h=15)
    assert (cost.flops, cost.exact) == (6 * 21 * 21 + 6 * 49, False)
    assert cost.flops == 2940
    assert cost.formula.subs(cost.dims) == cost.flops
    at_14 = estimate(pool, Float[Tensor, "b c h h"], b=2, c=3, h=14)
    assert at_14.flops == 6 * 14 * 14 + 6 * 49


def test_windows_that_tile_every_size_keep_an_exact_formula() -> None:
    cost = estimate(lambda x: F.adaptive_max_pool2d(x, 1)[0], Float[Tensor, "b c h w"],
                    b=2, c=3, h=5, w=6)  # fmt: skip
    assert cost.exact
    assert cost.flops == 2 * 3 * 5 * 6
    x = ones(2, 3, 5, 6)
    with record() as rec:
        F.adaptive_max_pool2d(x, 1)
    assert rec.total.flops == cost.flops
