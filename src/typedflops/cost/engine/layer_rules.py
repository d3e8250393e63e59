"""The FLOP rules of normalisation and pooling kernels, of the
gated linear unit, of ``nn.Bilinear``'s trilinear product and of ``conv_tbc`` (the
conventions they follow are written in :mod:`.rules`).

``_weight_norm_interface`` (``nn.utils.weight_norm`` and its parametrization, over the first
or the last dim: a CPU's ``WeightNormKernel.cpp`` and a GPU's kernel) with V values of ``v``
in G slices (one per value of ``g``): ``3·V + 2·G`` (each slice's norm, 2 per value and a
root, ``g/‖v‖``, and a multiply per value); its backward ``5·V + 4·G``. Over another dim
torch composes the norm of other ops, counted as they run.

``_trilinear`` (``nn.Bilinear``, ``y = x1ᵀ·A·x2``, and each of its gradients, which autograd
computes as ``_trilinear`` again) is counted as torch's kernel computes it: a loop over the
unrolled axis (the output features) of two pairwise products, each a ``bmm`` (2·m·n·k)
over the axes it sums where both sides have them, a multiply (1 per element of the
broadcast product) where it sums none, a sum (1 per input element) over an axis only one
side has; then an add of each step's result into the output. Forward, with x1 (N, I1),
x2 (N, I2) and A (O, I1, I2): ``O·(2·N·I1·I2 + 2·N·I2 + N)``, where the trilinear form's
multiply-adds alone are ``2·N·O·I1·I2``. The gradients: x1's ``O·(3·N·I1·I2 + N·I1)`` (the
weight slice times the output gradient is a multiply of N·I1·I2), A's ``O·(2·N·I1·I2 +
N·I1 + I1·I2)``, x2's ``O·(2·N·I1·I2 + 2·N·I2)``. Its matrix products' part (the ``matmul``
term of a Cost, :func:`layer_matmul_parts`) is the ``bmm`` FLOPs alone. On complex values a
product counts 4 times, a multiply 6 and an add 2 per element.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import sympy
import torch

from ...errors import NotPolynomial
from .opcall import OpCall, Rule
from .pointwise_rules import is_complex
from .tensors import flat_tensors, is_float, numel

__all__ = [
    "ACTIVATIONS",
    "activation_backward",
    "batched_sum_of_products",
    "is_activation",
    "layer_matmul_parts",
    "layer_rules",
    "norm_backward",
]

aten = torch.ops.aten


#: Activations whose kernels torch does not tag pointwise: one op per output element.
ACTIVATIONS = ("hardswish", "rrelu_with_noise", "_prelu_kernel", "log_sigmoid_forward")


def activation_backward(call: OpCall) -> Any:
    """An activation's backward kernel (``leaky_relu_backward``, ``hardtanh_backward``):
    the gradient times the activation's derivative, one op per value of each gradient it
    returns (as ``threshold_backward``, relu's)."""
    if not is_float(call.inputs[0]):
        return 0
    return sum(numel(t) for t in flat_tensors(call.out) if is_float(t))


def is_activation(name: str) -> bool:
    """Whether ``aten.<name>`` is an activation: a pointwise op or one of ACTIVATIONS
    (``log_sigmoid_forward``'s backward is ``log_sigmoid_backward``)."""
    if name in ACTIVATIONS or f"{name}_forward" in ACTIVATIONS:
        return True
    packet = getattr(aten, name, None)
    if packet is None:
        return False
    return any(torch.Tag.pointwise in getattr(packet, o).tags for o in packet.overloads())


def _glu(call: OpCall) -> Any:
    """A gated linear unit ``a·sigmoid(b)`` over the input's two halves: a sigmoid and a
    multiply per output element."""
    return 2 * numel(call.output) if is_float(call.inputs[0]) else 0


def _glu_backward(call: OpCall) -> Any:
    """Its backward per gradient value: the sigmoid again, ``1 - s``, ``grad·s`` for ``a``'s
    gradient and ``grad·a·s·(1 - s)`` (3) for ``b``'s: 6."""
    grad = call.inputs[0]
    return 6 * numel(grad) if is_float(grad) else 0


def batched_sum_of_products(call: OpCall) -> Any:
    """``addbmm``: the batch's matrix products, 2·b·m·n·k, summed into one matrix (the adds
    across the batch are the products' own, as in ``mm``; the added input is not counted,
    as ``addmm``'s bias is not)."""
    batch1, batch2 = call.inputs[1], call.inputs[2]
    count = 2 * numel(batch1) * batch2.shape[-1]
    return 4 * count if is_complex(call.inputs) else count  # (a complex multiply-add is 8)


def _layer_norm(call: OpCall) -> Any:
    x = call.inputs[0]
    weight = call.arg(2, "weight")
    bias = call.arg(3, "bias")
    affine = (weight is not None) + (bias is not None)
    return (5 + affine) * numel(x)


def _group_norm(call: OpCall) -> Any:
    x = call.inputs[0]
    affine = (call.arg(1, "weight") is not None) + (call.arg(2, "bias") is not None)
    return (5 + affine) * numel(x)


def _batch_norm(call: OpCall) -> Any:
    """Batch statistics (training): 5 per element, as layer norm; running statistics
    (eval): 2 (subtract the mean, divide by the deviation). Weight and bias add 1 each."""
    x = call.inputs[0]
    affine = (call.arg(1, "weight") is not None) + (call.arg(2, "bias") is not None)
    training = call.name in ("_native_batch_norm_legit", "_native_batch_norm_legit_functional")
    if call.name in ("native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm"):
        training = bool(call.arg(5, "training"))
    return ((5 if training else 2) + affine) * numel(x)


def norm_backward(call: OpCall) -> Any:
    grad = call.inputs[0]
    mask = call.arg(len(call.args) - 1, "output_mask", (True, True, True))
    mask = tuple(mask) if isinstance(mask, tuple | list) else (True, True, True)
    weights = (2 if len(mask) > 1 and mask[1] else 0) + (1 if len(mask) > 2 and mask[2] else 0)
    # With running statistics (eval mode) the input's gradient is a scale: times the
    # weight, divided by the deviation; with batch statistics, 8 per element.
    per_input = 2 if call.name == "native_batch_norm_backward" and not call.arg(7, "train") else 8
    return ((per_input if mask[0] else 0) + weights) * numel(grad)


def _per_axis(value: Any, axes: int) -> list[Any]:
    """A pooling argument given once or per axis, as a list with one value per axis."""
    sizes = list(value) if isinstance(value, tuple | list) else [value]
    return sizes * axes if len(sizes) == 1 else sizes


def _window_reads(call: OpCall, first: int, x: Any, out_shape: Sequence[Any]) -> Any:
    """The input elements the pooling windows read in all (from the op's ``kernel_size`` at
    argument ``first``, then its stride, padding, and for max pooling its dilation): each
    window's size times the outputs, less what the first and the last windows overhang
    (padding, and past the end in ceil mode), which the kernels skip.

    What the last windows overhang depends on the input's size only through the outputs'
    count: with sizes as formulas it is a number where that count follows the size (as
    the fitted ``out = h / 2`` does), or else the rule raises (a count fitted instead)."""
    axes = int(call.name.split("pool")[1][0])  # max_pool2d_with_indices: 2
    kernel = _per_axis(call.arg(first, "kernel_size"), axes)
    stride = _per_axis(call.arg(first + 1, "stride") or kernel, axes)
    padding = _per_axis(call.arg(first + 2, "padding", 0), axes)
    dilation = [1] * axes
    if call.name.startswith("max"):
        dilation = _per_axis(call.arg(first + 3, "dilation", 1), axes)
    sizes, outs = list(x.shape[-axes:]), list(out_shape[-axes:])
    total: Any = math.prod(out_shape[:-axes])  # (batch and channels: windows of each)
    for k, s, p, d, size, out in zip(kernel, stride, padding, dilation, sizes, outs, strict=True):
        overhang = sympy.sympify((out - 1) * s - p + (k - 1) * d - (size - 1))
        if not overhang.is_Integer:
            raise TypeError(f"{call.name}: the last window's overhang {overhang} is no number")
        total *= k * out - _overhung(p, k, s, d, out) - _overhung(int(overhang), k, s, d, out)
    return total


def _overhung(by: int, k: int, s: int, d: int, out: Any) -> int:
    """The elements outside the input of the windows at one end, the first (or last) of
    which overhangs it ``by`` elements, the next ``by - s``, and so on (at most ``out``)."""
    count, window = 0, 0
    while by - window * s > 0 and (not isinstance(out, int) or window < out):
        count += min(k, -(-(by - window * s) // d))  # (the window's elements beyond the end)
        window += 1
    return count


def _pool(call: OpCall) -> Any:
    """Max pooling: a compare per element of each output's window in the input (padding
    skipped); average pooling an add per such element and a divide per output."""
    x = call.inputs[0]
    if not is_float(x):
        return 0
    out = call.output
    reads = _window_reads(call, 1, x, out.shape)
    return reads + numel(out) if call.name.startswith("avg") else reads


def _pool_backward(call: OpCall) -> Any:
    """Max pooling's backward adds each output's gradient to the input it came from;
    average pooling's divides it and adds it to each element of its window in the input."""
    grad = call.inputs[0]
    if call.name.startswith("avg"):
        return _window_reads(call, 2, call.inputs[1], grad.shape) + numel(grad)
    return numel(grad)


def _adaptive_reads(call: OpCall, x: Any, out_shape: Sequence[Any]) -> Any:
    """The input elements adaptive pooling's windows read in all: along an axis of n into
    o outputs, window ``i`` is ``[floor(i·n/o), ceil((i + 1)·n/o))``, so each of the o - 1
    inner bounds that falls inside an element adds it to both windows: n + o - gcd(n, o)
    reads (7 into 5: 2, 2, 3, 2, 2, 11; 3 into 6: each element twice, 6). Where o divides n
    the windows tile the axis, n reads. With sizes as formulas, an axis whose windows tile
    it for every value (o = 1, n a multiple of o) reads n; any other is no polynomial in
    the sizes (:class:`NotPolynomial`)."""
    axes = int(call.name.split("pool")[1][0])  # _adaptive_avg_pool2d: 2
    total: Any = math.prod(out_shape[:-axes])  # (batch and channels: windows of each)
    for size, out in zip(x.shape[-axes:], out_shape[-axes:], strict=True):
        n, o = sympy.sympify(size), sympy.sympify(out)
        if n.is_Integer and o.is_Integer:
            total *= int(n) + int(o) - math.gcd(int(n), int(o))
            continue
        ratio = sympy.cancel(n / o)
        numerator, denominator = sympy.fraction(ratio)
        whole = denominator == 1 and all(
            c.is_Integer for c in sympy.Poly(numerator, *numerator.free_symbols).coeffs()
        )
        if not whole:
            raise NotPolynomial(f"adaptive pooling of {n} into {o}: n + o - gcd(n, o) reads")
        total *= size
    return total


def _adaptive_pool(call: OpCall) -> Any:
    """Adaptive pooling: one op per element of each output's window (an add or a compare;
    windows tile the input where the output's size divides it), and for the average a
    divide per output."""
    x = call.inputs[0]
    if not is_float(x):
        return 0
    reads = _adaptive_reads(call, x, call.output.shape)
    return reads + numel(call.output) if "avg" in call.name else reads


def _adaptive_pool_backward(call: OpCall) -> Any:
    """Adaptive max pooling's backward adds each gradient value to the input it came from;
    average pooling's divides it and adds it to each element of its window, as
    :func:`_pool_backward` counts average pooling."""
    grad = call.inputs[0]
    if not is_float(grad):
        return 0
    if "avg" in call.name:
        return _adaptive_reads(call, call.inputs[1], grad.shape) + numel(grad)
    return numel(grad)


def _trilinear(call: OpCall) -> Any:
    multiplies, adds, products = _trilinear_work(call)
    if is_complex(call.inputs):
        return 6 * multiplies + 2 * adds + 4 * products
    return multiplies + adds + products


def _trilinear_products(call: OpCall) -> Any:
    products = _trilinear_work(call)[2]
    return 4 * products if is_complex(call.inputs) else products


def _trilinear_work(call: OpCall) -> tuple[Any, Any, Any]:
    """``_trilinear``'s multiplies, adds (sums too) and ``bmm`` FLOPs, as its kernel runs
    them: ``i1``, ``i2``, ``i3`` unsqueezed at their ``expand`` axes, then for each index
    k of ``unroll_dim``: ``pair(pair(i1[k], i2[k], sums_12), i3[k], sums_23)`` added to the
    output, ``sums_12`` the summed axes (but the unrolled one) ``i3`` lacks, ``sums_23`` those
    it has."""
    tensors = call.inputs[:3]
    if not is_float(tensors[0]):
        return 0, 0, 0
    total = len(tensors[0].shape) + len(call.arg(3, "expand1"))
    expands = [
        {int(d) % total for d in call.arg(3 + j, name)}
        for j, name in enumerate(("expand1", "expand2", "expand3"))
    ]
    summed = {int(d) % total for d in call.arg(6, "sumdim")}
    unroll = int(call.arg(7, "unroll_dim", 1))
    shapes = [_unsqueezed(t.shape, e, total) for t, e in zip(tensors, expands, strict=True)]
    if any(size == 0 for shape in shapes for size in shape):
        return 0, 0, 0  # (an empty input: the output is its zeros)
    # the size of each axis: the last input's that has it (0 where none has it)
    sizes = [0] * total
    for shape, expand in zip(shapes, expands, strict=True):
        for axis in range(total):
            if axis not in expand:
                sizes[axis] = shape[axis]
    sums_12 = {a for a in summed if a != unroll and a in expands[2]}
    sums_23 = {a for a in summed if a != unroll and a not in expands[2]}
    sliced = [[1 if a == unroll else size for a, size in enumerate(s)] for s in shapes]
    first = _sum_of_products(sliced[0], sliced[1], sums_12)
    second = _sum_of_products(first[3], sliced[2], sums_23)
    added = math.prod(1 if a in summed or a == unroll else sizes[a] for a in range(total))
    steps = sizes[unroll]
    return (
        steps * (first[0] + second[0]),
        steps * (first[1] + second[1] + added),
        steps * (first[2] + second[2]),
    )


def _unsqueezed(shape: Sequence[Any], expand: set[int], total: int) -> list[Any]:
    found = list(shape)
    for axis in range(total):
        if axis in expand:
            found.insert(axis, 1)
    return found


def _sum_of_products(
    left: list[Any], right: list[Any], sums: set[int]
) -> tuple[Any, Any, Any, list[Any]]:
    """Torch's ``sumproduct_pair`` of two shapes of as many axes: its multiplies, adds,
    ``bmm`` FLOPs and the result's shape (summed axes kept at 1)."""
    if not sums:  # a broadcast multiply
        out = [lhs if lhs != 1 else rhs for lhs, rhs in zip(left, right, strict=True)]
        return math.prod(out), 0, 0, out
    left, right = list(left), list(right)
    adds: Any = 0
    batch = rows = columns = inner = 1
    for axis in range(len(left)):
        on_left, on_right = left[axis] != 1, right[axis] != 1
        if axis in sums:
            if on_left and on_right:
                inner *= left[axis]
            elif on_left:  # summed right away, one add per value
                adds += math.prod(left)
                left[axis] = 1
            elif on_right:
                adds += math.prod(right)
                right[axis] = 1
        elif on_left and on_right:
            batch *= left[axis]
        elif on_left:
            rows *= left[axis]
        else:
            columns *= right[axis]
    out = [
        1 if axis in sums else (left[axis] if left[axis] != 1 else right[axis])
        for axis in range(len(left))
    ]
    return 0, adds, 2 * batch * rows * inner * columns, out


def _conv_tbc(call: OpCall) -> Any:
    """``conv_tbc``: a 1-d convolution of a (time, batch, C_in) input with a (K, C_in, C_out)
    weight, run as torch's kernel runs it (``ConvolutionTBC.cpp``): the bias copied into
    the output, then for each tap k one product of the rows it reaches, ``t_k·B`` by C_in
    by C_out (2·t_k·B·C_in·C_out), the rows that fall in the padding skipped. t_k counts the
    output steps whose input step for tap k lies inside the input."""
    x, weight = call.inputs[0], call.inputs[1]
    if not is_float(x):
        return 0
    steps, batch, c_in = x.shape
    taps, c_out = int(weight.shape[0]), weight.shape[2]
    pad = int(call.arg(3, "pad", 0))
    out_steps = call.output.shape[0]
    rows = sum(_tbc_rows(steps, out_steps, taps, pad, k) for k in range(taps))
    count = 2 * rows * batch * c_in * c_out
    return 4 * count if is_complex(call.inputs) else count


def _tbc_rows(steps: Any, out_steps: Any, taps: int, pad: int, k: int) -> Any:
    """The output steps tap ``k`` of a ``conv_tbc`` reaches: ``[max(0, pad - k), end)``,
    ``end`` the input's last step shifted (``steps + pad - k``) where that ends first,
    else the output's end."""
    end = steps + pad - k if k >= taps - 1 - pad else out_steps
    rows = end - max(0, pad - k)
    return max(rows, 0) if isinstance(rows, int) else rows


def layer_matmul_parts() -> dict[Any, Rule]:
    """The matrix products' part of the rules of this module, by the op it counts (the
    others have none): all of ``conv_tbc``'s count."""
    return {aten._trilinear: _trilinear_products, aten.conv_tbc: _conv_tbc}


def _weight_norm(call: OpCall) -> Any:
    """``w = g·v/‖v‖`` over the slices of ``v`` (one per value of ``g``): each norm's squares
    and adds (2 per value of ``v``) and root, ``g/‖v‖`` per slice, a multiply per value."""
    v, g = call.inputs[0], call.inputs[1]
    return 3 * numel(v) + 2 * numel(g) if is_float(v) else 0


def _weight_norm_backward(call: OpCall) -> Any:
    """``grad_g = Σ grad_w·v/‖v‖``, ``grad_v = a·grad_w - b·v`` (``a = g/‖v‖``, ``b =
    a·grad_g/‖v‖``): the products' sum 2 and ``grad_v`` 3 per value of ``v``; per slice
    ``grad_g``, ``a`` and ``b``, 4."""
    v, g = call.inputs[1], call.inputs[2]  # (grad_w, saved_v, saved_g, saved_norms, dim)
    return 5 * numel(v) + 4 * numel(g) if is_float(v) else 0


def layer_rules() -> dict[Any, Rule]:
    """The rules of this module, by the op each counts."""
    rules: dict[Any, Rule] = {}
    rules[aten.native_layer_norm] = _layer_norm
    rules[aten.native_group_norm] = _group_norm
    for name in (
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training",
        "cudnn_batch_norm",
        "miopen_batch_norm",
    ):
        rules[getattr(aten, name)] = _batch_norm
    for name in (
        "native_layer_norm_backward",
        "native_group_norm_backward",
        "native_batch_norm_backward",
        "batch_norm_backward",
        "cudnn_batch_norm_backward",
        "miopen_batch_norm_backward",
    ):
        rules[getattr(aten, name)] = norm_backward
    rules[aten._weight_norm_interface] = _weight_norm
    rules[aten._weight_norm_interface_backward] = _weight_norm_backward
    rules[aten.glu] = _glu
    rules[aten.glu_backward] = _glu_backward
    rules[aten._trilinear] = _trilinear
    rules[aten.conv_tbc] = _conv_tbc
    for name in (
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "max_pool2d_with_indices",
        "max_pool3d_with_indices",
        "avg_pool1d",
        "avg_pool2d",
        "avg_pool3d",
    ):
        rules[getattr(aten, name)] = _pool
    for name in (
        "max_pool2d_with_indices_backward",
        "max_pool3d_with_indices_backward",
        "avg_pool2d_backward",
        "avg_pool3d_backward",
    ):
        rules[getattr(aten, name)] = _pool_backward
    for name in (
        "_adaptive_avg_pool2d",
        "_adaptive_avg_pool3d",
        "adaptive_max_pool2d",
        "adaptive_max_pool3d",
    ):
        rules[getattr(aten, name)] = _adaptive_pool
    for name in (
        "_adaptive_avg_pool2d_backward",
        "_adaptive_avg_pool3d_backward",
        "adaptive_max_pool2d_backward",
        "adaptive_max_pool3d_backward",
    ):
        rules[getattr(aten, name)] = _adaptive_pool_backward
    return rules
