"""The FLOP rules of attention kernels FlopCounterMode has no formula for: a CPU's flash
kernel, the fused kernel a backend may override, Apple's math kernel (forward and
backward counted as FlopCounterMode counts SDPA's other kernels, by its
``sdpa_flop_count`` and ``sdpa_backward_flop_count``: the products), and the flash forward
that writes into a given output (``varlen_attn_out``'s kernel), as FlopCounterMode counts
the flash forward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import flop_counter

from .opcall import OpCall, Rule

__all__ = ["attention_rules", "flash_attention_into"]

aten = torch.ops.aten


def _attention(call: OpCall) -> Any:
    query, key, value = call.inputs[:3]
    return flop_counter.sdpa_flop_count(query.shape, key.shape, value.shape)  # type: ignore[no-untyped-call]


def _attention_backward(call: OpCall) -> Any:
    grad_out, query, key, value = call.inputs[:4]
    return flop_counter.sdpa_backward_flop_count(  # type: ignore[no-untyped-call]
        grad_out.shape, query.shape, key.shape, value.shape
    )


def attention_rules() -> dict[Any, Rule]:
    """The shape rules of this module, by the op each counts (all matrix products)."""
    forward = (
        aten._scaled_dot_product_flash_attention_for_cpu,
        aten._scaled_dot_product_fused_attention_overrideable,
        aten._scaled_dot_product_attention_math_for_mps,
    )
    backward = (
        aten._scaled_dot_product_flash_attention_for_cpu_backward,
        aten._scaled_dot_product_fused_attention_overrideable_backward,
    )
    return {
        **{target: _attention for target in forward},
        **{target: _attention_backward for target in backward},
    }


def flash_attention_into(out: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> Any:
    """``_flash_attention_forward_no_dropout_inplace`` (``varlen_attn_out``'s kernel): the
    flash forward, writing its output into ``out``, counted as FlopCounterMode counts it
    (a raw rule: called with the op's arguments)."""
    forward = flop_counter.flop_registry[aten._flash_attention_forward]
    return forward(*args, out_val=out_val, **kwargs)
