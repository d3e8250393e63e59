"""``renorm``, fractional max pooling and ``histc``, forward and backward, held against hand
counts on a real CPU run (``record()``) and on meta (``estimate()``): one count for both.
FlopCounterMode has no formula for any of them (it counts them 0)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from jaxtyping import Float
from kernel_counts import Counts, flop_counter_total, on_cpu, on_meta
from torch import Tensor

import typedflops
from typedflops import record

AB = Float[Tensor, "a b"]
IMAGE = Float[Tensor, "n c h w"]
VOLUME = Float[Tensor, "n c d h w"]

# 5 x 3 (N = 15). renorm over dim 0 (S = 5 slices of 3): each slice's norm 2 per element
# and a root (35), its factor norm > maxnorm ? maxnorm/(norm + 1e-7) : 1, 3 per slice (15),
# a multiply per element (15): 3·N + 4·S = 65; over dim 1 (S = 3): 45 + 12 = 57. Its
# backward (torch's renorm_backward, composed of other ops, counted as they run): 165.
# histc over the input's own range (min == max): aminmax 1 per element, then 2 compares,
# the bin's subtract, multiply and divide, and the count's add: 7·N = 105; a range given
# skips the extrema: 6·N = 90.
CASES: list[tuple[str, Any, int, int | None]] = [
    ("renorm-dim0", lambda x: torch.renorm(x, 2, 0, 1.0), 3 * 15 + 4 * 5, 165),
    ("renorm-dim1-p1", lambda x: torch.renorm(x, 1, 1, 0.5), 3 * 15 + 4 * 3, None),
    ("histc-own-range", lambda x: torch.histc(x, 4), 7 * 15, 0),
    # (a range every value lies in: a dry run takes every element in range)
    ("histc-range", lambda x: torch.histc(x, 4, -1e6, 1e6), 6 * 15, 0),
]


@pytest.mark.parametrize(
    ("body", "forward", "backward"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_slice_op_is_counted_alike_on_a_cpu_and_on_meta(
    body: Any, forward: int, backward: int | None
) -> None:
    sizes = {"a": 5, "b": 3}
    found = on_cpu(body, [AB], sizes)
    assert (found.forward, found.uncounted) == (forward, ())
    if backward is not None:
        assert found.backward == backward
    assert on_meta(body, [AB], sizes) == found


def test_a_renorm_formula_is_in_the_dims() -> None:
    cost = typedflops.estimate(lambda x: torch.renorm(x, 2, 0, 1.0), AB, a=5, b=3)
    assert (str(cost.formula), cost.flops, cost.exact) == ("a*(3*b + 4)", 65, True)


def test_a_complex_renorm_multiplies_by_a_complex_factor() -> None:
    # 4 x 3 complex (N = 12), dim 0 (S = 4): the norm 4 per element and a root, the factor
    # 3 per slice, held at the complex dtype: a complex multiply per element, 6:
    # 10·N + 4·S = 136
    x = torch.randn(4, 3, dtype=torch.complex128)
    with record() as rec:
        torch.renorm(x, 2, 0, 1.0)
    assert (rec.total.flops, rec.total.uncounted) == (136, ())


def test_renorm_in_place_counts_as_renorm() -> None:
    # 5 x 3 over dim 0: 3·15 + 4·5, as the out-of-place op
    x = torch.randn(5, 3, dtype=torch.float64)
    with record() as rec:
        x.renorm_(2, 0, 1.0)
    assert (rec.total.flops, rec.total.uncounted) == (65, ())


def test_a_histogram_is_counted_by_its_range() -> None:
    # one shape, three calls: over its own range 7 per element; over a range given, each
    # element's first compare (x >= min), the second where it holds, the bin and the add (4)
    # for the elements in range (each call counted by its own min and max and values)
    x = torch.randn(5, 3, dtype=torch.float64)

    def given(low: float, high: float) -> int:
        return sum(1 + (v >= low) + 4 * (low <= v <= high) for v in x.flatten().tolist())

    with record() as rec:
        torch.histc(x, 4, -1.0, 1.0)
        torch.histc(x, 4)
        torch.histc(x, 4, 2.0, 3.0)
    assert (rec.total.flops, rec.total.uncounted) == (given(-1, 1) + 7 * 15 + given(2, 3), ())


FRACTIONAL: list[tuple[str, Any, Any, dict[str, int], int, int]] = [
    # 2 x 3 maps of 7 x 6 pooled by 2 x 2 windows to 3 x 4: 72 outputs, a compare per
    # window element (4); backward an add per gradient value, into the input it came from
    (
        "2d",
        lambda x: F.fractional_max_pool2d(x, 2, output_size=(3, 4)),
        IMAGE,
        {"n": 2, "c": 3, "h": 7, "w": 6},
        72 * 4,
        72,
    ),
    # 1 x 2 volumes of 5 x 6 x 7 by 2 x 3 x 2 windows to 2 x 3 x 4: 48 outputs of 12
    (
        "3d",
        lambda x: F.fractional_max_pool3d(x, (2, 3, 2), output_size=(2, 3, 4)),
        VOLUME,
        {"n": 1, "c": 2, "d": 5, "h": 6, "w": 7},
        48 * 12,
        48,
    ),
]


@pytest.mark.parametrize(
    ("body", "annotation", "sizes", "forward", "backward"),
    [c[1:] for c in FRACTIONAL],
    ids=[c[0] for c in FRACTIONAL],
)
def test_fractional_max_pooling_compares_each_window(
    body: Any, annotation: Any, sizes: dict[str, int], forward: int, backward: int
) -> None:
    expected = Counts(forward, backward, ())
    assert on_cpu(body, [annotation], sizes) == expected
    assert on_meta(body, [annotation], sizes) == expected


def test_a_fractional_pooling_formula_is_in_the_dims() -> None:
    body = lambda x: F.fractional_max_pool2d(x, 2, output_size=(3, 4))  # noqa: E731
    cost = typedflops.estimate(body, IMAGE, grad=("x",), n=2, c=3, h=7, w=6)
    assert (str(cost.formula), str(cost.backward_formula), cost.exact) == (
        "48*c*n",
        "12*c*n",
        True,
    )


def test_the_backward_that_ran_is_the_one_predicted() -> None:
    # renorm 65 forward, 165 backward (above); fractional pooling of 1 x 2 maps of 6 x 6 by
    # 2 x 2 to 3 x 3: 18 outputs, 72 compares, 18 adds back; the sums' adds (15, 18) and
    # their backward (0)
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    image = torch.randn(1, 2, 6, 6, dtype=torch.float64, requires_grad=True)
    with record() as rec:
        torch.renorm(x, 2, 0, 1.0).sum().backward()
        F.fractional_max_pool2d(image, 2, output_size=(3, 3)).sum().backward()
    assert (rec.total.flops, rec.total.backward_flops, rec.total.uncounted) == (
        65 + 15 + 72 + 18,
        165 + 18,
        (),
    )


def test_flop_counter_mode_counts_them_as_zero() -> None:
    # where typedflops departs: FlopCounterMode has no formula for these kernels
    x = torch.randn(5, 3, requires_grad=True)
    image = torch.randn(1, 2, 6, 6, requires_grad=True)
    assert flop_counter_total(lambda: torch.renorm(x, 2, 0, 1.0)) == 0
    assert flop_counter_total(lambda: F.fractional_max_pool2d(image, 2, output_size=3)) == 0
