"""The FLOP rules of convolutions: the kernels a backend runs when called by name
(``mkldnn_convolution``, ``slow_conv3d_forward``, ``slow_conv_transpose2d``, ...) and the
backward kernels (``convolution_backward`` and its backends' twins).

A convolution of N multiply-adds (its iteration space) costs 2·N forward, as
FlopCounterMode counts ``aten.convolution``; N is batch x output positions x C_out x
C_in/groups x kernel size (for a transposed convolution: batch x input positions x C_in x
C_out/groups x kernel size), that is numel(out) (numel(x) transposed) x
prod(weight.shape[1:]). The forward's bias add is not counted (as FlopCounterMode does
not, and as ``addmm``'s bias is not).

The backward kernel computes, as its ``output_mask`` asks: the input's gradient, 2·N; the
weight's gradient, 2·N; the bias's gradient, the sum of the output's gradient over batch
and positions, one add per element of it (numel(grad_out)), as the ``sum`` a Linear's
bias gradient runs is counted. FlopCounterMode counts the two products only, and takes a
grouped convolution's weight gradient as ungrouped (``groups`` times what runs).
On complex values a multiply-add is 8 real FLOPs and an add 2.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .opcall import OpCall, Rule
from .pointwise_rules import is_complex
from .tensors import TensorMeta

__all__ = [
    "FLOP_COUNTER_CORRECTIONS",
    "conv_backward_rules",
    "conv_forward_rules",
    "convolution_backward_flops",
]

aten = torch.ops.aten


def _products(
    x_shape: Sequence[Any], out_shape: Sequence[Any], w_shape: Sequence[Any], transposed: bool
) -> Any:
    """N, the multiply-adds of the forward: numel(out) (numel(x) transposed) x
    prod(weight.shape[1:])."""
    return math.prod(x_shape if transposed else out_shape) * math.prod(w_shape[1:])


def convolution_backward_flops(
    grad_out_shape: Sequence[Any],
    x_shape: Sequence[Any],
    w_shape: Sequence[Any],
    transposed: bool,
    output_mask: Sequence[bool],
) -> Any:
    """The FLOPs of a convolution's backward kernel: the input's gradient and the
    weight's, each 2·N (see the module), and the bias's, an add per element of the
    output's gradient (grad_out (B, C_out, *positions) summed to (C_out,)).

    >>> convolution_backward_flops((1, 96, 56, 56), (1, 96, 56, 56), (96, 1, 7, 7), False,
    ...                            (True, True, False))
    59006976
    >>> convolution_backward_flops((1, 96, 56, 56), (1, 96, 56, 56), (96, 1, 7, 7), False,
    ...                            (True, True, True))  # 59006976 + 96*56*56
    59308032
    """
    gradients = _gradient_products(grad_out_shape, x_shape, w_shape, transposed, output_mask)
    return gradients + _bias_sums(grad_out_shape, output_mask)


def _gradient_products(
    grad_out_shape: Sequence[Any],
    x_shape: Sequence[Any],
    w_shape: Sequence[Any],
    transposed: bool,
    output_mask: Sequence[bool],
) -> Any:
    """The input's and the weight's gradients: 2·N each, as the mask asks."""
    products = _products(x_shape, grad_out_shape, w_shape, transposed)
    return 2 * products * (bool(output_mask[0]) + bool(output_mask[1]))


def _bias_sums(grad_out_shape: Sequence[Any], output_mask: Sequence[bool]) -> Any:
    """The bias's gradient: grad_out (B, C_out, *positions) summed to (C_out,), an add per
    element."""
    if len(output_mask) < 3 or not output_mask[2]:
        return 0
    return math.prod(grad_out_shape)


# -- the backward kernels ---------------------------------------------------------------------

#: Each backward kernel's argument positions: (grad_output, input, weight, transposed or a
#: fixed bool, output_mask). ``mps_convolution_backward`` takes the input first.
_BACKWARD_ARGS: dict[str, tuple[int, int, int, int | bool, int]] = {
    "convolution_backward": (0, 1, 2, 7, 10),
    "convolution_backward_overrideable": (0, 1, 2, 6, 9),
    "_slow_conv2d_backward": (0, 1, 2, False, 6),
    "mps_convolution_backward": (1, 0, 2, False, 7),
    "mps_convolution_transpose_backward": (1, 0, 2, True, 8),
}


def _backward_parts(call: OpCall) -> tuple[Any, Any]:
    """A backward kernel's (gradient products, bias sums), in real FLOPs."""
    grad_at, x_at, w_at, transposed_at, mask_at = _BACKWARD_ARGS[call.name]
    grad_out: TensorMeta = call.args[grad_at]
    x: TensorMeta = call.args[x_at]
    weight: TensorMeta = call.args[w_at]
    transposed = (
        transposed_at if isinstance(transposed_at, bool) else call.arg(transposed_at, "transposed")
    )
    mask = tuple(call.arg(mask_at, "output_mask", (True, True, True)))
    products = _gradient_products(grad_out.shape, x.shape, weight.shape, bool(transposed), mask)
    sums = _bias_sums(grad_out.shape, mask)
    if is_complex(call.inputs):  # (a complex multiply-add is 8, an add 2)
        return 4 * products, 2 * sums
    return products, sums


def _convolution_backward(call: OpCall) -> Any:
    products, sums = _backward_parts(call)
    return products + sums


def _convolution_backward_products(call: OpCall) -> Any:
    """The matrix products' part: the input's and the weight's gradients (not the bias's
    sum, as a Linear's bias gradient, a ``sum``, is no product)."""
    return _backward_parts(call)[0]


def conv_backward_rules() -> dict[Any, tuple[Rule, Rule]]:
    """The backward kernels' rules and their matrix products' parts, by op."""
    found: dict[Any, tuple[Rule, Rule]] = {}
    for name in _BACKWARD_ARGS:
        packet = getattr(aten, name, None)
        if packet is not None:
            found[packet] = (_convolution_backward, _convolution_backward_products)
    return found


def _convolution_backward_shapes(
    grad_out_shape: Any,
    x_shape: Any,
    w_shape: Any,
    _bias: Any,
    _stride: Any,
    _padding: Any,
    _dilation: Any,
    transposed: bool,
    _output_padding: Any,
    _groups: Any,
    output_mask: Any,
    out_shape: Any = None,
) -> Any:
    return convolution_backward_flops(grad_out_shape, x_shape, w_shape, transposed, output_mask)


#: Where FlopCounterMode's formula counts other work than the kernel does, the formula
#: typedflops uses, as a ``FlopCounterMode(custom_mapping=...)`` takes it (shapes in), so
#: that FlopCounterMode and typedflops can be compared everywhere else.
FLOP_COUNTER_CORRECTIONS: dict[Any, Callable[..., Any]] = {
    aten.convolution_backward: _convolution_backward_shapes,
}


# -- the forward kernels called by name -------------------------------------------------------

#: The convolution kernels of the backends, as ``torch.ops.aten.<name>`` runs them when
#: called directly (``F.conv2d`` reaches them inside ``aten.convolution``, counted there):
#: whether each is transposed (the weight (C_in, C_out/groups, *kernel)).
_FORWARD_TRANSPOSED = {
    "mkldnn_convolution": False,
    "_slow_conv2d_forward": False,
    "slow_conv3d_forward": False,
    "slow_conv_dilated2d": False,
    "slow_conv_dilated3d": False,
    "_conv_depthwise2d": False,
    "conv_depthwise3d": False,
    "_nnpack_spatial_convolution": False,
    "cudnn_convolution": False,
    "miopen_convolution": False,
    "miopen_depthwise_convolution": False,
    "_mps_convolution": False,
    "slow_conv_transpose2d": True,
    "slow_conv_transpose3d": True,
    "cudnn_convolution_transpose": True,
    "miopen_convolution_transpose": True,
    "_mps_convolution_transpose": True,
}


def _forward(call: OpCall) -> Any:
    """2·N over the kernel's iteration space (x (B, C_in, *positions), weight (C_out,
    C_in/groups, *kernel), transposed (C_in, C_out/groups, *kernel))."""
    x, weight = call.args[0], call.args[1]
    count = 2 * _products(x.shape, call.output.shape, weight.shape, _FORWARD_TRANSPOSED[call.name])
    return 4 * count if is_complex(call.inputs) else count


def conv_forward_rules() -> dict[Any, Rule]:
    """The backends' forward kernels' rules (all of each a product), by op."""
    found: dict[Any, Rule] = {}
    for name in _FORWARD_TRANSPOSED:
        packet = getattr(aten, name, None)
        if packet is not None:
            found[packet] = _forward
    return found
