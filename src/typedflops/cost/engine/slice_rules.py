"""The FLOP rules of kernels that work slice by slice or window by window without a rule of
their family's module: ``renorm`` (a norm per slice, then a scale), fractional max pooling
(windows placed by random samples) and ``histc`` (a bin per element). The conventions they
follow are written in :mod:`.rules`.

- ``renorm(x, p, dim, maxnorm)`` (``ReduceOps.cpp``): the p-norm of each of the S slices
  along ``dim`` (``linalg_vector_norm``, counted as vector norms are: 2 per element and a
  root per slice), each slice's factor ``norm > maxnorm ? maxnorm / (norm + 1e-7) : 1`` (a
  compare, an add, a divide: 3 per slice, whichever branch the value takes), and a multiply
  per element: ``3·N + 4·S`` for N elements. On complex values the norm is 4 per element and
  the factor, held at the complex dtype, multiplies as a complex product (6):
  ``10·N + 4·S``. Its backward is composed of other ops, counted as they run.
- ``fractional_max_pool2d``, ``_3d`` (``FractionalMaxPool2d.cpp``): a compare per element
  of each output's window (``kH·kW``, ``kT·kH·kW``), which always lies in the input; the
  windows' starts, computed from the random samples, are positions and are not counted (as
  interpolation's weights are not). The backward adds each output's gradient into the
  input it came from: an add per gradient value (torch has no meta kernel for the 3-d
  one's; one is registered here, so a backward replayed on meta reaches it).
- ``histc(x, bins, min, max)`` (``HistogramKernel.cpp``, linear bins): per element two
  compares (inside ``[min, max]``), its bin ``(x - min)·bins/(max - min)`` (a subtract, a
  multiply and a divide: the width is the same for every element) and an add into its bin:
  6. Where ``min == max`` (the default) the range is the input's own (``aminmax``, counted
  as that reduction is: 1 per element) and every element lies in it; an element outside a
  range given stops at the compares (``!(x >= min && x <= max)``: one where ``x < min`` or
  NaN, two above ``max``), which only its value tells (see :mod:`.skipped_work`). The
  per-thread histograms' sum depends on the thread count, not on the sizes, and is not
  counted.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .opcall import OpCall, Rule
from .pointwise_rules import is_complex
from .tensors import is_float, numel

__all__ = ["SLICE_READ_NUMBERS", "slice_rules"]

aten = torch.ops.aten


def _renorm(call: OpCall) -> Any:
    """A norm per slice (2 per element, a root), 3 per slice for the factor, a multiply per
    element; complex values 4 per element for the norm and 6 for the multiply."""
    x = call.inputs[0]
    if not is_float(x):
        return 0
    dim = int(call.arg(2, "dim"))
    slices = x.shape[dim]
    elements = numel(x)
    per_element = 10 if is_complex([x]) else 3
    return per_element * elements + 4 * slices


def _fractional_max_pool(call: OpCall) -> Any:
    """A compare per element of each output's window."""
    x = call.inputs[0]
    if not is_float(x):
        return 0
    window = math.prod(int(k) for k in call.arg(1, "kernel_size"))
    return window * numel(call.output)


def _fractional_max_pool_backward(call: OpCall) -> Any:
    """An add per gradient value, into the input it came from."""
    grad = call.inputs[0]
    return numel(grad) if is_float(grad) else 0


def _histc(call: OpCall, ranged: Any = None) -> Any:
    """Two compares, the bin's subtract, multiply and divide, and the count's add per
    element; the input's extrema (1 per element) where ``min == max``. ``ranged``: the
    elements at least ``min`` and those in range, (None: all in range)."""
    x = call.inputs[0]
    if not is_float(x):
        return 0
    own_range = float(call.arg(2, "min", 0)) == float(call.arg(3, "max", 0))
    if ranged is None or own_range:
        return (6 + own_range) * numel(x)
    at_least, inside = ranged
    return numel(x) + at_least + 4 * inside


def _fractional_max_pool3d_backward_on_meta(
    grad_output: torch.Tensor, input: torch.Tensor, *rest: Any
) -> torch.Tensor:
    """The input's gradient of 3-d fractional max pooling, as the CPU and GPU kernels give it
    (torch has no meta kernel: a backward replayed on meta needs one)."""
    return torch.empty_like(input, memory_format=torch.contiguous_format)


_LIBRARY: torch.library.Library | None = None
if not torch._C._dispatch_has_kernel_for_dispatch_key(
    "aten::fractional_max_pool3d_backward", "Meta"
):
    _LIBRARY = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]
    _LIBRARY.impl(  # type: ignore[no-untyped-call]
        "fractional_max_pool3d_backward", _fractional_max_pool3d_backward_on_meta, "Meta"
    )


#: The numbers (not tensors, not sizes) a rule of this module reads, by op.
SLICE_READ_NUMBERS: dict[Any, tuple[str, ...]] = {aten.histc: ("min", "max")}


def slice_rules() -> dict[Any, Rule]:
    """The rules of this module, by the op each counts."""
    return {
        aten.renorm: _renorm,
        aten.fractional_max_pool2d: _fractional_max_pool,
        aten.fractional_max_pool3d: _fractional_max_pool,
        aten.fractional_max_pool2d_backward: _fractional_max_pool_backward,
        aten.fractional_max_pool3d_backward: _fractional_max_pool_backward,
        aten.histc: _histc,
    }
