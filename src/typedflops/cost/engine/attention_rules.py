"""The FLOP rules of the fused attention kernels: their products over the query-key pairs
each computes (:mod:`.attention_pairs`), per batch entry and query head:

- forward, the scores and the weighted values: 2·P·(d_q + d_v);
- backward, the products FlopCounterMode's ``sdpa_backward_flop_count`` names (the scores
  again, the gradient of the weights, of the values, of the queries and of the keys):
  2·P·(3·d_q + 2·d_v).

Without a causal mask P = s_q·s_k, FlopCounterMode's ``sdpa_flop_count`` and
``sdpa_backward_flop_count``. With ``is_causal``, on a CPU P is what its flash kernel
computes, whole blocks of keys up to each block of queries' last; a GPU's kernels are
counted over every pair, as FlopCounterMode counts them and as the papers' model FLOPs
(Narayanan et al., PaLM's MFU) do (the kernels skip the blocks past the diagonal: the count
is the model's, an upper bound of what runs); a FlashAttention-2 local window is counted
over the pairs in it. Rules here: the CPU's flash kernel
(which FlopCounterMode has no formula for), the GPU's flash, memory-efficient and cuDNN
kernels (those of SDPA, with tensors ``(b, h, s, d)``, and those called directly, with
tensors ``(b, s, h, d)``, or ``(total, h, d)`` with offsets for sequences of several
lengths), the flash forward that writes into a given output (``varlen_attn_out``'s
kernel), and, over every pair, the fused kernel a backend may override and Apple's math
kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from .attention_pairs import cpu_flash_pairs, window_pairs
from .opcall import OpCall, Rule
from .tensors import TensorMeta, map_meta

__all__ = [
    "attention_corrections",
    "attention_rules",
    "flash_attention_into",
    "raw_attention_rules",
]

aten = torch.ops.aten

#: Per pair, the head sizes each pass multiplies by (forward: d_q + d_v; backward:
#: 3·d_q + 2·d_v), as (d_q's, d_v's) multiples.
_FORWARD = (1, 1)
_BACKWARD = (3, 2)


def _flops(pairs: Any, batch_heads: Any, d_q: Any, d_v: Any, products: tuple[int, int]) -> Any:
    return 2 * batch_heads * pairs * (products[0] * d_q + products[1] * d_v)


def _sdpa_count(causal_at: int, products: tuple[int, int], pairs: Any) -> Any:
    """The count of a kernel taking ``(b, h, s, d)`` tensors, from its arguments with
    tensors as their shapes (as FlopCounterMode's formulas take them); ``is_causal`` is its
    argument ``causal_at``, ``pairs(s_q, s_k, causal)`` the pairs it computes. A backward's
    first tensor is the output's gradient, then query, key and value."""
    first = 1 if products == _BACKWARD else 0

    def count(*args: Any, out_shape: Any = None, **kwargs: Any) -> Any:
        query, key, value = args[first : first + 3]
        causal = bool(args[causal_at] if len(args) > causal_at else kwargs.get("is_causal"))
        batch, heads, s_q, d_q = query
        return _flops(pairs(s_q, key[2], causal), batch * heads, d_q, value[-1], products)

    return count


def _shape(value: Any) -> Any:
    return value.shape if isinstance(value, TensorMeta) else value


def _sdpa_rule(causal_at: int, products: tuple[int, int], pairs: Any) -> Rule:
    """:func:`_sdpa_count` as a rule of an :class:`OpCall`."""
    count = _sdpa_count(causal_at, products, pairs)

    def rule(call: OpCall) -> Any:
        kwargs = {key: map_meta(value, _shape) for key, value in call.kwargs.items()}
        return count(*map_meta(call.args, _shape), **kwargs)

    return rule


def _cpu_pairs(s_q: Any, s_k: Any, causal: bool) -> Any:
    return cpu_flash_pairs(s_q, s_k, causal)


def _every_pair(s_q: Any, s_k: Any, causal: bool) -> Any:
    return s_q * s_k


#: The GPU's kernels of SDPA: is_causal's argument, the pass, the causal mask's alignment.
_GPU_SDPA = {
    aten._scaled_dot_product_flash_attention: (4, _FORWARD),
    aten._scaled_dot_product_flash_attention_backward: (11, _BACKWARD),
    aten._scaled_dot_product_efficient_attention: (6, _FORWARD),
    aten._scaled_dot_product_efficient_attention_backward: (11, _BACKWARD),
    aten._scaled_dot_product_cudnn_attention: (6, _FORWARD),
    aten._scaled_dot_product_cudnn_attention_backward: (14, _BACKWARD),
}


def attention_rules() -> dict[Any, Rule]:
    """The shape rules of this module, by the op each counts (all matrix products)."""
    rules = {
        aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_rule(4, _FORWARD, _cpu_pairs),
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_rule(
            7, _BACKWARD, _cpu_pairs
        ),
        # (a backend's own kernel, its blocks unknown; Apple's math kernel: every pair)
        aten._scaled_dot_product_fused_attention_overrideable: _sdpa_rule(5, _FORWARD, _every_pair),
        aten._scaled_dot_product_fused_attention_overrideable_backward: _sdpa_rule(
            13, _BACKWARD, _every_pair
        ),
        aten._scaled_dot_product_attention_math_for_mps: _sdpa_rule(5, _FORWARD, _every_pair),
    }
    for target, (causal_at, products) in _GPU_SDPA.items():
        rules[target] = _sdpa_rule(causal_at, products, _every_pair)
    return rules


def attention_corrections() -> dict[Any, Any]:
    """Where FlopCounterMode counts the GPU's kernels over every pair, the counts used here,
    as ``FlopCounterMode(custom_mapping=...)`` takes them (shapes in; the kernels called
    directly with their arguments)."""
    found: dict[Any, Any] = {
        target: _sdpa_count(causal_at, products, _every_pair)
        for target, (causal_at, products) in _GPU_SDPA.items()
    }
    for target, raw in raw_attention_rules().items():
        raw._get_raw = True  # (FlopCounterMode passes it the arguments, not shapes)
        found[target] = raw
    return found


# -- kernels called directly: (b, s, h, d) tensors, or (total, h, d) with offsets -----------


def _lengths(offsets: torch.Tensor, longest: Any) -> list[int]:
    """Each sequence's length from its offsets (at the longest where they have no values:
    fake or meta)."""
    if isinstance(offsets, torch._subclasses.FakeTensor) or offsets.device.type == "meta":
        return [int(longest)] * (offsets.shape[0] - 1)
    return [int(n) for n in offsets.diff().tolist()]


def _sequences(
    query: torch.Tensor,
    key: torch.Tensor,
    offsets: tuple[torch.Tensor | None, torch.Tensor | None],
    longest: tuple[Any, Any],
) -> Iterator[tuple[int, int, int]]:
    """(batch entries x query heads, s_q, s_k) of each run of a kernel called directly."""
    if offsets[0] is None or offsets[1] is None:  # dense (b, s, h, d)
        yield query.shape[0] * query.shape[2], query.shape[1], key.shape[1]
        return
    heads = query.shape[-2]
    s_q, s_k = _lengths(offsets[0], longest[0]), _lengths(offsets[1], longest[1])
    for length_q, length_k in zip(s_q, s_k, strict=True):
        yield heads, length_q, length_k


def _direct(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    offsets: tuple[torch.Tensor | None, torch.Tensor | None],
    longest: tuple[Any, Any],
    pairs: Callable[[int, int], int],
    products: tuple[int, int],
) -> int:
    d_q, d_v = query.shape[-1], value.shape[-1]
    return sum(
        _flops(pairs(s_q, s_k), runs, d_q, d_v, products)
        for runs, s_q, s_k in _sequences(query, key, offsets, longest)
    )


def _flash_pairs(causal: bool, options: dict[str, Any]) -> Callable[[int, int], int]:
    """The pairs FlashAttention-2 is counted over: every pair without a local window (a
    causal mask included, as FlopCounterMode and the papers' MFU count it), else those of
    its window (``window_size_left``, ``window_size_right``; with ``is_causal`` the right
    one is 0), bottom-right aligned."""
    left, right = options.get("window_size_left"), options.get("window_size_right")
    if (left is None or left < 0) and (right is None or right < 0):
        return lambda s_q, s_k: int(s_q) * int(s_k)
    if causal:
        right = 0
    return lambda s_q, s_k: window_pairs(int(s_q), int(s_k), left, right)


def _all_pairs(s_q: int, s_k: int) -> int:
    return s_q * s_k


def _flash_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cum_seq_q: torch.Tensor | None,
    cum_seq_k: torch.Tensor | None,
    max_q: Any,
    max_k: Any,
    dropout_p: float,
    is_causal: bool,
    *_: Any,
    **options: Any,
) -> int:
    """``_flash_attention_forward``: query ``(b, s_q, h, d)`` or ``(total_q, h, d)``."""
    offsets, longest = (cum_seq_q, cum_seq_k), (max_q, max_k)
    pairs = _flash_pairs(is_causal, options)
    return _direct(query, key, value, offsets, longest, pairs, _FORWARD)


def _flash_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    logsumexp: torch.Tensor,
    cum_seq_q: torch.Tensor | None,
    cum_seq_k: torch.Tensor | None,
    max_q: Any,
    max_k: Any,
    dropout_p: float,
    is_causal: bool,
    *_: Any,
    **options: Any,
) -> int:
    """``_flash_attention_backward``: as its forward."""
    offsets, longest = (cum_seq_q, cum_seq_k), (max_q, max_k)
    pairs = _flash_pairs(is_causal, options)
    return _direct(query, key, value, offsets, longest, pairs, _BACKWARD)


def _efficient_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor | None,
    cu_seqlens_q: torch.Tensor | None,
    cu_seqlens_k: torch.Tensor | None,
    max_seqlen_q: Any,
    max_seqlen_k: Any,
    dropout_p: float,
    custom_mask_type: int,
    *_: Any,
    **__: Any,
) -> int:
    """``_efficient_attention_forward``: query ``(b, s_q, h, d)`` (b = 1 with offsets)."""
    offsets, longest = (cu_seqlens_q, cu_seqlens_k), (max_seqlen_q, max_seqlen_k)
    return _direct(query, key, value, offsets, longest, _all_pairs, _FORWARD)


def _efficient_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    cu_seqlens_q: torch.Tensor | None,
    cu_seqlens_k: torch.Tensor | None,
    max_seqlen_q: Any,
    max_seqlen_k: Any,
    logsumexp: torch.Tensor,
    dropout_p: float,
    philox_seed: torch.Tensor,
    philox_offset: torch.Tensor,
    custom_mask_type: int,
    *_: Any,
    **__: Any,
) -> int:
    """``_efficient_attention_backward``: as its forward."""
    offsets, longest = (cu_seqlens_q, cu_seqlens_k), (max_seqlen_q, max_seqlen_k)
    return _direct(query, key, value, offsets, longest, _all_pairs, _BACKWARD)


def raw_attention_rules() -> dict[Any, Any]:
    """The rules of the kernels called directly, by op: called with the op's arguments."""
    return {
        aten._flash_attention_forward: _flash_forward,
        aten._flash_attention_backward: _flash_backward,
        aten._efficient_attention_forward: _efficient_forward,
        aten._efficient_attention_backward: _efficient_backward,
    }


def flash_attention_into(out: Any, *args: Any, **kwargs: Any) -> Any:
    """``_flash_attention_forward_no_dropout_inplace`` (``varlen_attn_out``'s kernel): the
    flash forward, writing its output into ``out`` (a raw rule: called with the op's
    arguments)."""
    return _flash_forward(*args, **kwargs)
