"""Reflection and replication padding and nearest upsampling, forward and backward, held
against hand counts on a real CPU run (``record()``) and on meta (``estimate()``): one count
for both. Their forward is a copy (0 FLOPs); their backward adds each gradient value into
the input position it was copied from, one add per value of the output's gradient.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from jaxtyping import Float
from kernel_counts import Counts, on_cpu, on_meta
from torch import Tensor

import typedflops
from typedflops import record

LINE = Float[Tensor, "n c w"]
IMAGE = Float[Tensor, "n c h w"]
VOLUME = Float[Tensor, "n c d h w"]
SIZES = {"n": 2, "c": 3, "d": 3, "h": 4, "w": 5}


def _pad(mode: str, *widths: int) -> Any:
    return lambda x: F.pad(x, widths, mode=mode)


def _up(mode: str, **options: Any) -> Any:
    return lambda x: F.interpolate(x, mode=mode, **options)


CASES: list[tuple[str, Any, Any, int]] = [
    # the output gradient's values: n·c = 6 times the padded or scaled axes
    ("reflect-1d", _pad("reflect", 2, 1), LINE, 6 * 8),
    ("reflect-2d", _pad("reflect", 1, 2, 1, 0), IMAGE, 6 * 5 * 8),
    ("reflect-3d", _pad("reflect", 1, 1, 1, 1, 2, 1), VOLUME, 6 * 6 * 6 * 7),
    ("replicate-1d", _pad("replicate", 3, 0), LINE, 6 * 8),
    ("replicate-2d", _pad("replicate", 1, 1, 2, 2), IMAGE, 6 * 8 * 7),
    ("replicate-3d", _pad("replicate", 1, 0, 0, 1, 1, 1), VOLUME, 6 * 5 * 5 * 6),
    ("nearest-1d", _up("nearest", scale_factor=3), LINE, 6 * 15),
    ("nearest-2d", _up("nearest", scale_factor=2), IMAGE, 6 * 8 * 10),
    ("nearest-2d-size", _up("nearest", size=(5, 7)), IMAGE, 6 * 5 * 7),
    ("nearest-3d", _up("nearest", scale_factor=2), VOLUME, 6 * 6 * 8 * 10),
    ("nearest-exact-1d", _up("nearest-exact", scale_factor=2), LINE, 6 * 10),
    ("nearest-exact-2d", _up("nearest-exact", size=(3, 7)), IMAGE, 6 * 3 * 7),
    ("nearest-exact-3d", _up("nearest-exact", scale_factor=2), VOLUME, 6 * 6 * 8 * 10),
]


@pytest.mark.parametrize(
    ("body", "annotation", "backward"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_copy_is_free_and_its_backward_adds_each_gradient_value(
    body: Any, annotation: Any, backward: int
) -> None:
    expected = Counts(0, backward, ())
    assert on_cpu(body, [annotation], SIZES) == expected
    assert on_meta(body, [annotation], SIZES) == expected


def test_a_complex_pad_adds_complex_values() -> None:
    # a complex add is 2 real FLOPs
    body = _pad("reflect", 1, 2, 1, 0)
    assert on_cpu(body, [IMAGE], SIZES, torch.complex128) == Counts(0, 2 * 6 * 5 * 8, ())


def test_a_pad_backward_formula_is_in_the_dims() -> None:
    body = _pad("replicate", 1, 2, 1, 0)
    cost = typedflops.estimate(body, IMAGE, grad=("x",), n=2, c=3, h=4, w=5)
    assert str(cost.backward_formula) == "c*n*(h + 1)*(w + 3)"
    assert (cost.flops, cost.backward_flops, cost.exact) == (0, 6 * 5 * 8, True)


def test_a_backward_that_ran_counts_its_adds() -> None:
    # a training step's backward, run inside the record: conv (weights only), pad, upsample
    x = torch.randn(2, 3, 4, 5)
    conv = torch.nn.Conv2d(3, 3, 1, bias=False)
    with record() as rec:
        y = F.interpolate(F.pad(conv(x), (1, 1, 1, 1), mode="reflect"), scale_factor=2)
        y.sum().backward()
    # conv 2·(2·20·3)·3 forward and the same for the weight's gradient; the sum's adds
    # 2·3·12·14 = 1008 forward; backward the upsampling's 1008 adds, the pad's 2·3·6·7 = 252
    conv_flops = 2 * 2 * 20 * 3 * 3
    assert rec.total.flops == conv_flops + 1008
    assert (rec.total.backward_flops, rec.total.uncounted) == (conv_flops + 1008 + 252, ())


def test_an_accumulating_unsafe_put_adds_each_value() -> None:
    # the backward of a gather decomposed from nearest upsampling: an add per value put
    base, values = torch.zeros(6), torch.randn(4)
    index = torch.tensor([0, 1, 1, 5])
    with record() as rec:
        torch.ops.aten._unsafe_index_put(base, [index], values, accumulate=True)
        torch.ops.aten._unsafe_index_put(base, [index], values)
    assert (rec.total.flops, rec.total.uncounted) == (4, ())
