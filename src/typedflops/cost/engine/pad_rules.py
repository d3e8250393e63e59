"""The FLOP rules of the backward kernels of copies that read an input value several times:
reflection and replication padding and nearest upsampling (``F.pad(mode="reflect")``,
``"replicate"``, ``F.interpolate(mode="nearest")`` and ``"nearest-exact"``). The conventions
they follow are written in :mod:`.rules`.

Their forward copies values (0 FLOPs). Their backward zeroes the input's gradient and adds
every gradient value into the input position it was copied from (``grad_input[i] +=
grad_output[o]``, torch's CPU kernels ``cpu_padding_backward`` and
``cpu_upsample_nearest_backward``): one add per gradient value, the accumulator starting at
zero as everywhere (a complex add 2). Padded by p on each side of an axis of n, that is
``n + 2p`` adds along it; a scale of 2 in each of d axes, ``2^d`` adds per input element.
Where the index arithmetic of the positions is done is not counted (it depends on the
positions alone, as interpolation's weights).
"""

from __future__ import annotations

from typing import Any

import torch

from .index_rules import index_put
from .opcall import OpCall, Rule
from .pointwise_rules import words
from .tensors import is_float, numel

__all__ = ["pad_rules"]

aten = torch.ops.aten

_BACKWARD = words(
    """
    reflection_pad1d_backward reflection_pad2d_backward reflection_pad3d_backward
    replication_pad1d_backward replication_pad2d_backward replication_pad3d_backward
    upsample_nearest1d_backward upsample_nearest2d_backward upsample_nearest3d_backward
    _upsample_nearest_exact1d_backward _upsample_nearest_exact2d_backward
    _upsample_nearest_exact3d_backward
    """
)


def _added_back(call: OpCall) -> Any:
    """An add per gradient value (the first argument), 2 for a complex one."""
    grad = call.inputs[0]
    if not is_float(grad):
        return 0
    return (2 if grad.dtype.is_complex else 1) * numel(grad)


def pad_rules() -> dict[Any, Rule]:
    """The rules of this module, by the op each counts; and ``_unsafe_index_put`` (the
    backward of a gather decomposed from nearest upsampling), an accumulating put."""
    rules: dict[Any, Rule] = {}
    for name in sorted(_BACKWARD):
        packet = getattr(aten, name, None)
        if packet is not None:
            rules[packet] = _added_back
    rules[aten._unsafe_index_put] = index_put
    return rules
