"""A convolution's backward counted as its kernel computes it: the input's and the weight's
gradients (2·N each, N the forward's multiply-adds) and the bias's, the output's gradient
summed over batch and positions (an add per element, as a Linear's bias gradient, a
``sum``, is counted); and the backends' convolution kernels called by name.

Hand counts: N = numel(out) x C_in/groups x kernel size (numel(x) x C_out/groups x kernel
size for a transposed convolution). The docs/costs.md table quotes these.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import estimate, record
from typedflops.testing import assert_matches_flop_counter

aten = torch.ops.aten

#: (name, the module, the input's shape): every kind of convolution nn builds.
CONVOLUTIONS: list[tuple[str, Callable[[bool], nn.Module], tuple[int, ...]]] = [
    ("conv1d", lambda bias: nn.Conv1d(3, 4, 3, bias=bias), (2, 3, 9)),
    (
        "conv2d-strided",
        lambda bias: nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=bias),
        (2, 3, 7, 7),
    ),
    ("conv3d", lambda bias: nn.Conv3d(2, 3, 2, bias=bias), (2, 2, 4, 4, 4)),
    ("conv_transpose1d", lambda bias: nn.ConvTranspose1d(3, 4, 3, stride=2, bias=bias), (2, 3, 5)),
    ("conv_transpose2d", lambda bias: nn.ConvTranspose2d(3, 6, 3, bias=bias), (2, 3, 5, 5)),
    ("conv_transpose3d", lambda bias: nn.ConvTranspose3d(2, 4, 2, bias=bias), (2, 2, 3, 3, 3)),
    ("grouped", lambda bias: nn.Conv2d(4, 6, 3, groups=2, bias=bias), (2, 4, 6, 6)),
    (
        "grouped-transposed",
        lambda bias: nn.ConvTranspose2d(4, 6, 2, groups=2, bias=bias),
        (2, 4, 4, 4),
    ),
    ("depthwise", lambda bias: nn.Conv2d(5, 5, 3, padding=1, groups=5, bias=bias), (2, 5, 6, 6)),
    ("batch-1", lambda bias: nn.Conv2d(3, 4, 3, bias=bias), (1, 3, 6, 6)),
]


def _hand_count(conv: Any, x: Tensor, out: Tensor) -> tuple[int, int]:
    """(forward, backward) by hand: 2·N forward; 2·N for the input's gradient and 2·N for
    the weight's; an add per element of the output's gradient for the bias's."""
    transposed = isinstance(conv, nn.modules.conv._ConvTransposeNd)
    weight = conv.weight
    products = (x if transposed else out).numel() * math.prod(weight.shape[1:])
    bias_sums = out.numel() if conv.bias is not None else 0
    return 2 * products, 2 * products * 2 + bias_sums


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize(
    ("make", "shape"), [case[1:] for case in CONVOLUTIONS], ids=[case[0] for case in CONVOLUTIONS]
)
def test_a_convolution_backward_counts_the_bias_gradient_it_computes(
    make: Callable[[bool], nn.Module], shape: tuple[int, ...], with_bias: bool
) -> None:
    # conv_transpose2d, 3 -> 6 channels, 3x3, on 2 x 3 x 5 x 5 (out 2 x 6 x 7 x 7):
    # N = 2·3·5·5 · 6·9 = 8,100; backward 4·N = 32,400, and the bias's gradient
    # 2·6·7·7 = 588 adds, which were not counted (32,400 recorded, 32,988 ran)
    torch.manual_seed(0)
    conv = make(with_bias)
    x = torch.randn(*shape, requires_grad=True)
    with record() as rec:
        out = conv(x)
        out.backward(torch.ones_like(out))  # (no op: the gradient given, all ones)
    forward, backward = _hand_count(conv, x, out)
    assert (rec.total.flops, rec.total.backward_flops) == (forward, backward)
    assert rec.total.uncounted == ()
    # the dry run predicts the backward a real one runs
    spec = Float[Tensor, " ".join(f"d{i}" for i in range(len(shape)))]
    sizes: dict[str, Any] = {f"d{i}": size for i, size in enumerate(shape)}
    cost = estimate(lambda t: conv(t), spec, grad=("t",), **sizes)
    assert (cost.flops, cost.backward_flops) == (forward, backward)


def test_the_products_of_a_convolution_backward_are_flop_counter_modes_count() -> None:
    # groups=1: FlopCounterMode's backward is the two products alone, 4·N; the bias's sum
    # is the difference, an add per element of the output's gradient
    conv = nn.Conv2d(8, 16, 3, stride=2, padding=1)
    x = torch.randn(2, 8, 15, 15, requires_grad=True)
    out = conv(x)
    with FlopCounterMode(display=False) as counter:
        out.backward(torch.ones_like(out))
    with record() as rec:
        out = conv(x)
        out.backward(torch.ones_like(out))
    assert out.shape == (2, 16, 8, 8)
    products = 2 * 16 * 8 * 8 * 8 * 9
    assert counter.get_total_flops() == 4 * products
    assert rec.total.backward_flops == 4 * products + 2 * 16 * 8 * 8


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_a_pointwise_convolution_and_a_linear_over_the_same_rows_cost_the_same_backward(
    with_bias: bool,
) -> None:
    # Conv1d(5, 7, 1) on (2, 5, 9) is Linear(5, 7) on the 18 rows: backward 2 products of
    # 2·18·5·7 = 1,260 and, with a bias, its gradient's 18·7 = 126 adds (the Linear's sum)
    conv = nn.Conv1d(5, 7, 1, bias=with_bias)
    linear = nn.Linear(5, 7, bias=with_bias)

    def rows(x: Tensor) -> Tensor:
        out: Tensor = linear(x.transpose(1, 2).reshape(-1, 5))
        return out

    x = torch.randn(2, 5, 9, requires_grad=True)
    backwards = []
    for body in (conv, rows):
        with record() as rec:
            out = body(x)
            out.backward(torch.ones_like(out))
        backwards.append(rec.total.backward_flops)
    expected = 2 * 1260 + (126 if with_bias else 0)
    assert backwards == [expected, expected]
    spec = Float[Tensor, "b c l"]
    predicted = [estimate(body, spec, b=2, c=5, l=9).backward_flops for body in (conv, rows)]
    assert predicted == [expected - 1260] * 2  # (the input requires no grad)


def test_assert_matches_flop_counter_compares_a_biased_convolution() -> None:
    # the bias's sum is in the formula FlopCounterMode is given, so the two agree: out
    # (2, 4, 4, 4), N = 128·27; the input's and the weight's gradients 2·N each, the bias's
    # 128 adds
    conv = nn.Conv2d(3, 4, 3)
    compared = assert_matches_flop_counter(conv, torch.randn(2, 3, 6, 6), loss=torch.sum)
    assert compared.backward == compared.torch_backward == 2 * 2 * 4 * 4 * 4 * 27 + 2 * 4 * 4 * 4


# -- the backends' kernels called by name -----------------------------------------------------

_X2 = (2, 3, 9, 9)
_X3 = (2, 3, 5, 5, 5)


def _by_name(op: str, x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """The backend's kernel, called with its own argument order."""
    calls: dict[str, Callable[[], Tensor]] = {
        "mkldnn_convolution": lambda: aten.mkldnn_convolution(x, w, b, [1, 1], [2, 2], [1, 1], 1),
        "_slow_conv2d_forward": lambda: aten._slow_conv2d_forward(x, w, [3, 3], b, [2, 2], [1, 1]),
        "slow_conv3d_forward": lambda: aten.slow_conv3d_forward(
            x, w, [3, 3, 3], b, [1, 1, 1], [0, 0, 0]
        ),
        "slow_conv_dilated2d": lambda: aten.slow_conv_dilated2d(
            x, w, [3, 3], b, [1, 1], [0, 0], [2, 2]
        ),
        "slow_conv_transpose2d": lambda: aten.slow_conv_transpose2d(
            x, w, [3, 3], b, [1, 1], [0, 0]
        ),
        "slow_conv_transpose3d": lambda: aten.slow_conv_transpose3d(
            x, w, [3, 3, 3], b, [1, 1, 1], [0, 0, 0]
        ),
    }
    return calls[op]()


#: (op, input shape, weight shape, transposed)
BACKENDS = [
    ("mkldnn_convolution", _X2, (4, 3, 3, 3), False),
    ("_slow_conv2d_forward", _X2, (4, 3, 3, 3), False),
    ("slow_conv3d_forward", _X3, (4, 3, 3, 3, 3), False),
    ("slow_conv_dilated2d", _X2, (4, 3, 3, 3), False),
    ("slow_conv_transpose2d", _X2, (3, 4, 3, 3), True),
    ("slow_conv_transpose3d", _X3, (3, 4, 3, 3, 3), True),
]


@pytest.mark.parametrize(
    ("op", "x_shape", "w_shape", "transposed"), BACKENDS, ids=[b[0] for b in BACKENDS]
)
def test_a_backend_convolution_called_by_name_is_counted_as_it_runs(
    op: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], transposed: bool
) -> None:
    # was listed uncounted (forward 0, and _slow_conv2d_forward's FlopCounterMode formula
    # raised: it has no `transposed`); forward 2·N, backward 4·N and the bias's adds
    x = torch.randn(*x_shape, requires_grad=True)
    w = torch.randn(*w_shape, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    with record() as rec:
        out = _by_name(op, x, w, b)
    with record() as ran:
        out.backward(torch.ones_like(out))
    products = (x if transposed else out).numel() * math.prod(w_shape[1:])
    assert rec.total.flops == rec.total.matmul_flops == 2 * products
    assert not [line for line in rec.total.uncounted if "backward" not in line]
    assert ran.total.backward_flops == 2 * 2 * products + out.numel()
    assert ran.total.uncounted == ()
