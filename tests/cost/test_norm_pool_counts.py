"""Counts of norms and pooling, held against hand counts and a window-by-window count: batch
norm's two modes follow the documented rule, and a pooling window counts the elements that lie
in the input (padding and what a ceil-mode window overhangs are skipped, as the kernels skip
them), where FlopCounterMode counts nothing.

The "Where typedflops and FlopCounterMode differ" table of docs/costs.md quotes these hand counts.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from kernel_counts import Counts, recorded
from torch import Tensor, nn

from typedflops import estimate, record, typed_flops

# -- norms, pooling ---------------------------------------------------------------------------


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_counts_follow_the_documented_rule_in_both_modes(affine: bool) -> None:
    norm = nn.BatchNorm2d(8, affine=affine)
    x = torch.randn(4, 8, 5, 5)
    elements = x.numel()
    weights = 2 if affine else 0
    norm.train()
    assert recorded(lambda: norm(x)).forward == (5 + weights) * elements
    norm.eval()
    assert recorded(lambda: norm(x)).forward == (2 + weights) * elements
    # Its backward in eval mode scales the gradient; with batch statistics it is 8 per
    # element (and the weight's and bias's gradients, 2 and 1, either way).
    y = x.clone().requires_grad_(True)
    norm.eval()
    assert recorded(lambda: norm(y)).backward == (2 + (3 if affine else 0)) * elements
    norm.train()
    assert recorded(lambda: norm(y)).backward == (8 + (3 if affine else 0)) * elements


def test_batch_norm_in_a_dry_run_counts_as_in_a_real_run() -> None:
    norm = nn.BatchNorm1d(6).eval()

    @typed_flops
    def apply(x: Float[Tensor, "b 6"]) -> Float[Tensor, "b 6"]:
        return norm(x)  # type: ignore[no-any-return]

    cost = apply.estimate(b=10)
    assert cost.flops == recorded(lambda: norm(torch.randn(10, 6))).forward == 4 * 60
    assert str(cost.formula) == "24*b"


@pytest.mark.parametrize("grad", [False, True])
def test_batch_norm_in_eval_mode_writes_what_a_device_writes(grad: bool) -> None:
    """Meta's kernel gives a mean and an inverse deviation per channel that a CPU's (and
    a GPU's) leaves empty in eval mode: a dry run writes the output alone, 4 x 60 bytes,
    as the real run does; its backward scales the gradient, as there."""
    norm = nn.BatchNorm1d(6).eval()
    cost = estimate(norm, Float[Tensor, "b 6"], b=10, grad=("input",) if grad else ())
    x = torch.randn(10, 6, requires_grad=grad)
    with record() as rec:
        norm(x)
    assert cost.bytes_written == rec.total.bytes_written == 4 * 60
    assert cost.bytes_read == rec.total.bytes_read
    assert cost.backward_flops == rec.total.backward_flops == (2 * 60 if grad else 0) + 3 * 60


@pytest.mark.parametrize(
    ("pool", "forward", "backward"),
    [
        # max over a 3x3 window, 4x4 outputs of 2x3 maps: a compare per window element in
        # the input (the padding skipped): windows at -1, 1, 3, 5 hold 2, 3, 3, 3 rows of 8
        (lambda x: F.max_pool2d(x, 3, 2, 1), 6 * 11 * 11, 96),
        # average of 2x2: 4 adds and a divide per output; backward the same per gradient
        (lambda x: F.avg_pool2d(x, 2), 96 * 5, 96 * 5),
        # adaptive: windows of 4x4 that tile the input, each input once, a divide per
        # output; backward as average pooling's (the window's adds and a divide)
        (lambda x: F.adaptive_avg_pool2d(x, 2), 384 + 24, 384 + 24),
        (lambda x: F.adaptive_max_pool2d(x, 2)[0], 384, 24),
        # windows that overlap (8 into 3: [0, 3), [2, 6), [5, 8), 10 reads an axis) and
        # repeat (8 into 12: each element 1.5 times on average, 16 reads an axis)
        (lambda x: F.adaptive_avg_pool2d(x, 3), 6 * 10 * 10 + 54, 6 * 10 * 10 + 54),
        (lambda x: F.adaptive_max_pool2d(x, 3)[0], 6 * 10 * 10, 54),
        (lambda x: F.adaptive_avg_pool2d(x, (12, 3)), 6 * 16 * 10 + 216, 6 * 16 * 10 + 216),
    ],
)
def test_pooling_is_counted(pool: Any, forward: int, backward: int) -> None:
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    assert recorded(lambda: pool(x)) == Counts(forward, backward, ())


def _window_reads(size: int, out: int, k: int, stride: int, pad: int, dilation: int) -> int:
    """Window elements in ``[0, size)`` over ``out`` windows, one by one."""
    starts = [o * stride - pad for o in range(out)]
    return sum(0 <= start + j * dilation < size for start in starts for j in range(k))


@pytest.mark.parametrize(
    ("kind", "k", "stride", "pad", "dilation", "ceil"),
    [
        ("max", 3, 2, 1, 1, False),
        ("max", 3, 2, 0, 1, True),
        ("max", 3, 2, 1, 1, True),
        ("max", 3, 1, 1, 2, False),
        ("max", 2, 2, 0, 1, False),
        ("avg", 3, 2, 1, 1, False),
        ("avg", 3, 2, 1, 1, True),
        ("avg", 2, 2, 0, 1, True),
    ],
)
@pytest.mark.parametrize("axes", [1, 2, 3])
def test_pooling_counts_the_windows_in_the_input(
    kind: str, k: int, stride: int, pad: int, dilation: int, ceil: bool, axes: int
) -> None:
    # The kernels skip what a window overhangs (padding, and past the end in ceil mode):
    # max pooling compares the elements in the input, average pooling adds them and
    # divides once per output; its backward divides each gradient and adds it to them.
    size, channels = 7, 3
    x = torch.randn(2, channels, *[size] * axes, requires_grad=True)

    def run() -> Tensor:
        if kind == "max":
            pool = getattr(F, f"max_pool{axes}d")
            return pool(x, k, stride, pad, dilation=dilation, ceil_mode=ceil)  # type: ignore[no-any-return]
        return getattr(F, f"avg_pool{axes}d")(x, k, stride, pad, ceil_mode=ceil)  # type: ignore[no-any-return]

    y = run()
    out = y.shape[-1]
    reads = 2 * channels * _window_reads(size, out, k, stride, pad, dilation) ** axes
    outputs = y.numel()
    forward = reads if kind == "max" else reads + outputs
    backward = outputs if kind == "max" else reads + outputs
    assert recorded(run) == Counts(forward, backward, ())


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    kind=st.sampled_from(["max", "avg"]),
    k=st.integers(1, 5),
    stride=st.integers(1, 4),
    ceil=st.booleans(),
)
def test_any_pooling_window_counts_what_lies_in_the_input(
    data: st.DataObject, kind: str, k: int, stride: int, ceil: bool
) -> None:
    pad = data.draw(st.integers(0, k // 2))
    dilation = data.draw(st.integers(1, 3)) if kind == "max" else 1
    size = data.draw(st.integers(max(1, (k - 1) * dilation + 1 - 2 * pad), 20))
    x = torch.randn(1, 2, size, size, requires_grad=True)

    def run() -> Tensor:
        if kind == "max":
            return F.max_pool2d(x, k, stride, pad, dilation=dilation, ceil_mode=ceil)
        return F.avg_pool2d(x, k, stride, pad, ceil_mode=ceil)

    y = run()
    reads = 2 * _window_reads(size, y.shape[-1], k, stride, pad, dilation) ** 2
    forward = reads if kind == "max" else reads + y.numel()
    assert recorded(run).forward == forward
