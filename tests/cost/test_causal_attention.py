"""Causal attention counted over the query-key pairs the kernels compute, not over every pair.

A CPU's flash kernel (``FlashAttentionKernel.cpp``) computes whole blocks of 512 keys: a
block of queries computes the key blocks that start before its last query's position + 1,
so nothing is skipped up to 512 keys and 5/8 of the pairs are computed at 2048. A GPU's
kernels skip past the diagonal too, with blocks of their own: they are counted over the
pairs the mask keeps. Products per pair, per batch entry and query head: forward
2·(d_q + d_v), backward 2·(3·d_q + 2·d_v) (the products of FlopCounterMode's
``sdpa_backward_flop_count``). The hand counts below are quoted in docs/costs.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record, typed_flops
from typedflops.cost.engine.attention_pairs import cpu_flash_pairs, window_pairs
from typedflops.cost.engine.attention_rules import attention_rules
from typedflops.cost.engine.kernels import kernels_of
from typedflops.cost.engine.opcall import OpCall
from typedflops.cost.engine.rules import FLOP_COUNTER_CORRECTIONS
from typedflops.cost.engine.tensors import TensorMeta

aten = torch.ops.aten
CPU_FORWARD = aten._scaled_dot_product_flash_attention_for_cpu
CPU_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward


def kernel_keys(s_q: int, s_k: int, causal: bool) -> list[int]:
    """The keys the CPU flash kernel computes for each query: its loops, written out
    (forward and backward alike): query blocks of 256, 64 or 32 by the query length, key
    blocks of 512, each split at most its length; with ``is_causal`` a query block at ``m``
    of ``q_block`` queries runs the key blocks starting below ``min(m + q_block, s_k)``,
    each ``min(512, s_k - n)`` keys."""
    split = 256 if s_q >= 768 else 64 if s_q >= 192 else 32
    q_split, kv_split = min(split, s_q), min(512, s_k)
    keys: list[int] = []
    for m in range(0, s_q, q_split):
        q_block = min(q_split, s_q - m)
        num_keys = min(m + q_block, s_k) if causal else s_k
        computed = 0
        for n in range(0, num_keys, kv_split):
            computed += min(kv_split, s_k - n)
        keys += [computed] * q_block
    return keys


def meta(*shape: Any) -> TensorMeta:
    return TensorMeta(tuple(shape), (), torch.float32, "cpu", True)


def rule_count(op: Any, args: tuple[Any, ...]) -> Any:
    return attention_rules()[op](OpCall(str(op), args, {}, None))


# -- the CPU's flash kernel ------------------------------------------------------------

HAND_PAIRS = [
    # (s_q, s_k, pairs computed, written out)
    (300, 300, 300 * 300),  # one key block: every pair
    (512, 512, 512 * 512),
    (513, 513, 512 * 512 + 1 * 513),  # queries 0-511 one key block; query 512 both (513 keys)
    (600, 600, 512 * 512 + 88 * 600),  # queries 512-599 (blocks of 64) all 600 keys
    # blocks of 256: 0-255 and 256-511 one key block, 512-767 and 768-1023 two (1024 keys),
    # 1024-1099 three (512 + 512 + 76)
    (1100, 1100, 512 * 512 + 512 * 1024 + 76 * 1100),
    # blocks of 256 queries computing 1, 1, 2, 2, 3, 3, 4, 4 blocks of 512 keys
    (2048, 2048, 256 * 512 * (1 + 1 + 2 + 2 + 3 + 3 + 4 + 4)),
    (100, 1100, 100 * 512),  # top-left: 100 queries, the first key block only
    (1100, 600, 512 * 512 + 588 * 600),  # queries past 512 see every key
]


@pytest.mark.parametrize(("s_q", "s_k", "pairs"), HAND_PAIRS)
def test_cpu_pairs_by_hand(s_q: int, s_k: int, pairs: int) -> None:
    assert cpu_flash_pairs(s_q, s_k, True) == sum(kernel_keys(s_q, s_k, True)) == pairs
    assert cpu_flash_pairs(s_q, s_k, False) == s_q * s_k


def test_at_2048_five_eighths_of_the_pairs() -> None:
    assert 256 * 512 * 20 == 2_621_440 == 5 * 2048**2 // 8
    assert cpu_flash_pairs(2048, 2048, True) == 2_621_440


def test_a_size_too_large_to_loop_over_is_counted_at_once() -> None:
    """2**40 queries and keys: (s/512) blocks of 512 queries compute 1..s/512 key blocks,
    s·(s + 512)/2 pairs (a sum no loop over 2**32 blocks gives in time)."""
    s = 2**40
    assert cpu_flash_pairs(s, s, True) == s * (s + 512) // 2


@pytest.mark.parametrize(
    ("s_q", "s_k"), [(600, 600), (1100, 1100), (2048, 2048), (100, 1100), (1100, 600)]
)
def test_the_blocks_are_those_the_cpu_kernel_runs(s_q: int, s_k: int) -> None:
    """A NaN in key j's value (forward) or key (backward) reaches query i < j (which the mask
    hides it from) exactly where the kernel computed key j's block for i's block: the
    masked weight 0 times NaN in the product with the values, and the masked score's
    gradient 0 times NaN in the query's gradient."""
    keys = kernel_keys(s_q, s_k, True)
    d = 4
    for j in sorted({0, 511, 512, 700, 1023, 1024, 1500, s_k - 1} & set(range(s_k))):
        q, k, v = torch.randn(1, 1, s_q, d), torch.randn(1, 1, s_k, d), torch.randn(1, 1, s_k, d)
        v[0, 0, j] = float("nan")
        out, _ = CPU_FORWARD(q, k, v, 0.0, True)
        seen = torch.isnan(out[0, 0, :, 0]).tolist()
        assert seen[:j] == [j < keys[i] for i in range(min(j, s_q))]
        v[0, 0, j] = 0.0
        k[0, 0, j] = float("nan")
        out, lse = CPU_FORWARD(q, k, v, 0.0, True)
        grad_q = CPU_BACKWARD(torch.ones_like(out), q, k, v, out, lse, 0.0, True)[0]
        seen = torch.isnan(grad_q[0, 0, :, 0]).tolist()
        assert seen[:j] == [j < keys[i] for i in range(min(j, s_q))]


@typed_flops
def attend(
    q: Float[Tensor, "b h s d"], k: Float[Tensor, "b h s d"], v: Float[Tensor, "b h s d"]
) -> Float[Tensor, "b h s d"]:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _attention_row(rec: Any) -> Any:
    (row,) = [op for op in rec.total.ops if op.op == "scaled_dot_product_attention"]
    return row


@pytest.mark.parametrize(("s", "pairs"), [(p[0], p[2]) for p in HAND_PAIRS if p[0] == p[1]])
def test_a_real_cpu_run_records_the_blocks_it_computed(s: int, pairs: int) -> None:
    """Forward 2·b·h·P·(d + d), backward 2·b·h·P·(3d + 2d), with b = 1, h = 2, d = 8."""
    q, k, v = (torch.randn(1, 2, s, 8, requires_grad=True) for _ in range(3))
    with record() as rec:
        attend(q, k, v).sum().backward()
    row = _attention_row(rec)
    assert row.forward.count == 2 * 1 * 2 * pairs * (8 + 8)
    assert row.backward.count == 2 * 1 * 2 * pairs * (3 * 8 + 2 * 8)
    assert rec.total.backward_flops == row.backward.count  # (sum's backward: no FLOPs)


def test_grouped_query_heads_a_mask_and_a_batch_of_one_on_a_cpu() -> None:
    """Four query heads over two key/value heads (``enable_gqa``): the pairs per query head.
    A mask beside ``is_causal`` is added to the scores; the blocks are the causal ones.
    At s = 600: P = 314,944 (above); forward 2·1·4·P·16, backward 2·1·4·P·40."""
    pairs = 512 * 512 + 88 * 600
    q = torch.randn(1, 4, 600, 8, requires_grad=True)
    k, v = (torch.randn(1, 2, 600, 8, requires_grad=True) for _ in range(2))
    mask = torch.ones(600, 600, dtype=torch.bool)
    with record() as rec:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.sum().backward()
        F.scaled_dot_product_attention(q, q, q, attn_mask=mask, is_causal=True)
    grouped, masked = [op for op in rec.total.ops if op.op == "scaled_dot_product_attention"]
    assert grouped.forward.count == 2 * 1 * 4 * pairs * 16
    assert grouped.backward.count == 2 * 1 * 4 * pairs * 40
    assert masked.forward.count == 2 * 1 * 4 * pairs * 16


def test_dropout_on_a_cpu_runs_the_math_path_over_every_pair() -> None:
    """With dropout a CPU runs SDPA's math path (torch's choice), which multiplies every
    pair: its two products 2·b·h·s²·d each, masked or not."""
    q = torch.randn(1, 2, 600, 8)
    with record() as rec:
        F.scaled_dot_product_attention(q, q, q, dropout_p=0.5, is_causal=True)
    assert rec.total.matmul_flops == 2 * (2 * 1 * 2 * 600 * 600 * 8)


@pytest.mark.parametrize("s", [513, 600, 2048])
def test_an_estimate_for_a_cpu_counts_what_a_real_run_records(s: int) -> None:
    q, k, v = (torch.randn(1, 2, s, 8, requires_grad=True) for _ in range(3))
    with record() as rec:
        attend(q, k, v).sum().backward()
    with kernels_of("cpu"):
        cost = attend.estimate(b=1, h=2, s=s, d=8, grad=("q", "k", "v"))
    (row,) = [op for op in cost.ops if op.op == "scaled_dot_product_attention"]
    recorded = _attention_row(rec)
    assert (row.forward.count, row.backward.count) == (
        recorded.forward.count,
        recorded.backward.count,
    )


def test_a_cpu_formula_fitted_below_512_keys_is_not_exact() -> None:
    """At s = 64 every pair is computed: 4·b·h·s²·d fits the runs, but gives 268,435,456 at
    s = 2048 (b = 1, h = 2, d = 8) where 2·1·2·2,621,440·16 = 167,772,160 run: not exact,
    row and total. Fitted at 2048, the formula gives 2048's count and is not exact either
    (the pairs are piecewise in s)."""
    dims = {"b": 1, "h": 2, "s": 2048, "d": 8}
    with kernels_of("cpu"):
        small = attend.estimate(b=1, h=2, s=64, d=8, grad=("q", "k", "v"))
        large = attend.estimate(b=1, h=2, s=2048, d=8, grad=("q", "k", "v"))
    assert small.forward.at(dims) == 268_435_456 != 2 * 1 * 2 * 2_621_440 * 16
    (row,) = small.ops
    assert not (small.forward.exact or small.backward.exact or small.matmul.exact)
    assert not (row.forward.exact or row.backward.exact)
    assert large.flops == large.forward.at(dims) == 167_772_160
    assert not large.forward.exact


def _cpu_args(causal: bool, heads: int, kv: int, s_q: int, s_k: int, d: int) -> Any:
    q, k, v = meta(2, heads, s_q, d), meta(2, kv, s_k, d), meta(2, kv, s_k, d)
    forward = rule_count(CPU_FORWARD, (q, k, v, 0.0, causal))
    grad_out, out, lse = meta(2, heads, s_q, d), meta(2, heads, s_q, d), meta(2, heads, s_q)
    backward = rule_count(CPU_BACKWARD, (grad_out, q, k, v, out, lse, 0.0, causal))
    return forward, backward


@settings(max_examples=60, deadline=None)
@given(
    s_q=st.integers(1, 1400),
    s_k=st.integers(1, 1400),
    d=st.integers(1, 64),
    kv=st.integers(1, 3),
    group=st.integers(1, 3),
    causal=st.booleans(),
)
def test_the_cpu_rule_is_the_kernels_loops(
    s_q: int, s_k: int, d: int, kv: int, group: int, causal: bool
) -> None:
    heads = kv * group
    forward, backward = _cpu_args(causal, heads, kv, s_q, s_k, d)
    pairs = sum(kernel_keys(s_q, s_k, causal))
    assert forward == 2 * 2 * heads * pairs * (d + d)
    assert backward == 2 * 2 * heads * pairs * (3 * d + 2 * d)
    if not causal:  # FlopCounterMode's formulas, unchanged
        shapes = ((2, heads, s_q, d), (2, kv, s_k, d), (2, kv, s_k, d))
        assert forward == flop_counter.sdpa_flop_count(*shapes)  # type: ignore[no-untyped-call]
        assert backward == flop_counter.sdpa_backward_flop_count(  # type: ignore[no-untyped-call]
            shapes[0], *shapes
        )


# -- a GPU's kernels: every pair, as FlopCounterMode and the papers' model FLOPs --------

GPU_FORWARD: dict[Any, Callable[[bool], tuple[Any, ...]]] = {
    # op: the arguments after query, key and value, up to is_causal
    aten._scaled_dot_product_flash_attention: lambda causal: (0.0, causal),
    aten._scaled_dot_product_efficient_attention: lambda causal: (None, True, 0.0, causal),
    aten._scaled_dot_product_cudnn_attention: lambda causal: (None, True, 0.0, causal),
}


@pytest.mark.parametrize("op", list(GPU_FORWARD))
def test_gpu_kernels_count_every_pair_causal_or_not(op: Any) -> None:
    """b = h = 1, s = 2048, d = 64: 4·2048²·64 = 1,073,741,824 forward, FlopCounterMode's
    count, with the causal mask or without (Narayanan's and PaLM's model FLOPs count every
    pair; the kernel skips the blocks past the diagonal, so this bounds what runs)."""
    q = meta(1, 1, 2048, 64)
    shape = (1, 1, 2048, 64)
    every = flop_counter.sdpa_flop_count(shape, shape, shape)  # type: ignore[no-untyped-call]
    assert every == 4 * 2048**2 * 64 == 1_073_741_824
    assert rule_count(op, (q, q, q, *GPU_FORWARD[op](True))) == every
    assert rule_count(op, (q, q, q, *GPU_FORWARD[op](False))) == every


def test_gpu_backwards_count_every_pair() -> None:
    """Backward, b = h = 1, s = 2048, d = 64: 2·2048²·(3·64 + 2·64) = 2,684,354,560,
    FlopCounterMode's 2.5 times its forward."""
    t = meta(1, 1, 2048, 64)
    lse = meta(1, 1, 2048)
    calls = {
        aten._scaled_dot_product_flash_attention_backward: (
            t, t, t, t, t, lse, None, None, 2048, 2048, 0.0, True, None, None,
        ),
        aten._scaled_dot_product_efficient_attention_backward: (
            t, t, t, t, None, t, lse, None, None, 0.0, [True] * 4, True,
        ),
        aten._scaled_dot_product_cudnn_attention_backward: (
            t, t, t, t, t, lse, None, None, None, None, None, 2048, 2048, 0.0, True,
        ),
    }  # fmt: skip
    for op, args in calls.items():
        assert rule_count(op, args) == 2 * 2048**2 * (3 * 64 + 2 * 64) == 2_684_354_560


def test_kernels_called_directly_read_their_layout_and_offsets() -> None:
    """``_flash_attention_forward`` takes (b, s, h, d): b = 2, s = 100, h = 4, d = 16 is
    4·2·4·100²·16 = 5,120,000, causal or not (FlopCounterMode reads it as (b, h, s, d):
    204,800). Sequences of 3 and 7 tokens (offsets 0, 3, 10), 4 heads, d = 16:
    2·4·(9 + 49)·32 = 14,848, each sequence at its length, as FlopCounterMode counts it,
    written into a given output or not. The memory-efficient kernel, 4 queries, 6 keys, one
    head, d = 8: 2·24·(8 + 8) = 768 whatever its ``custom_mask_type``."""
    dense = torch.empty(2, 100, 4, 16, device="meta")
    packed = torch.empty(10, 4, 16, device="meta")
    offsets = torch.tensor([0, 3, 10], dtype=torch.int32)
    q, k = torch.empty(1, 4, 1, 8, device="meta"), torch.empty(1, 6, 1, 8, device="meta")
    with record() as rec, FlopCounterMode(display=False) as counter:
        aten._flash_attention_forward(dense, dense, dense, None, None, 100, 100, 0.0, False, False)
    assert (rec.total.flops, counter.get_total_flops()) == (5_120_000, 204_800)
    with record() as rec:
        aten._flash_attention_forward(dense, dense, dense, None, None, 100, 100, 0.0, True, False)
        varlen = (packed, packed, packed, offsets, offsets, 7, 7, 0.0, True, False)
        aten._flash_attention_forward(*varlen)
        # (varlen_attn_out's kernel: the same forward, into a given output)
        aten._flash_attention_forward_no_dropout_inplace(torch.empty_like(packed), *varlen)
        for mask_type in (0, 1, 2):
            aten._efficient_attention_forward(q, k, k, None, None, None, None, None, 0.0, mask_type)
    counts = [op.forward.count for op in rec.total.ops if op.forward.count]
    with FlopCounterMode(display=False) as counter:
        aten._flash_attention_forward(*varlen)
    varlen_count = 2 * 4 * (9 + 49) * 32
    assert counter.get_total_flops() == varlen_count == 14_848
    assert [c for c in counts if c != varlen_count] == [5_120_000, 768, 768, 768]
    assert sum(counts) == 5_120_000 + 2 * varlen_count + 3 * 768


def test_a_sliding_window_counts_the_keys_it_keeps() -> None:
    """FlashAttention-2's local mask: ``window_size_left=256`` with ``is_causal``, s = 2048:
    queries 0-255 see i + 1 keys, the other 1,792 each 257, 256·257/2 + 1792·257 = 493,440
    pairs; b = h = 1, d = 64: forward 2·493,440·128 = 126,320,640, backward
    2·493,440·(3·64 + 2·64) = 315,801,600 (every pair: 1,073,741,824)."""
    q = torch.empty(1, 2048, 1, 64, device="meta", dtype=torch.bfloat16, requires_grad=True)
    windowed = {"window_size_left": 256, "window_size_right": 0}
    with record() as rec:
        out = aten._flash_attention_forward(
            q, q, q, None, None, 2048, 2048, 0.0, True, False, **windowed
        )[0]
        out.sum().backward()
    row = rec.total.ops[0]
    pairs = 256 * 257 // 2 + 1792 * 257
    assert pairs == 493_440
    assert (row.forward.count, row.backward.count) == (2 * pairs * 128, 2 * pairs * 320)
    assert (row.forward.count, row.backward.count) == (126_320_640, 315_801_600)


@settings(max_examples=80, deadline=None)
@given(
    s_q=st.integers(1, 40),
    s_k=st.integers(1, 40),
    left=st.one_of(st.none(), st.integers(-1, 45)),
    right=st.one_of(st.none(), st.integers(-1, 45)),
)
def test_window_pairs_are_the_pairs_in_the_window(
    s_q: int, s_k: int, left: int | None, right: int | None
) -> None:
    """Query i sees key j where i + s_k - s_q - left <= j <= i + s_k - s_q + right (a side
    None or negative unbounded), counted pair by pair."""
    shift = s_k - s_q
    kept = sum(
        (left is None or left < 0 or j >= i + shift - left)
        and (right is None or right < 0 or j <= i + shift + right)
        for i in range(s_q)
        for j in range(s_k)
    )
    assert window_pairs(s_q, s_k, left, right) == kept


def test_flop_counter_mode_given_the_corrections_counts_as_typedflops() -> None:
    """``FlopCounterMode(custom_mapping=FLOP_COUNTER_CORRECTIONS)`` (as
    ``assert_matches_flop_counter`` compares) counts a GPU's causal kernel as here, every
    pair: b = 2, h = 4, s = 16, d = 64, memory-efficient: 2·2·4·16²·128 = 524,288."""
    q = torch.empty(2, 4, 16, 64, device="meta")
    with FlopCounterMode(display=False, custom_mapping=FLOP_COUNTER_CORRECTIONS) as counter:
        aten._scaled_dot_product_efficient_attention(q, q, q, None, False, 0.0, True)
    assert counter.get_total_flops() == 2 * 2 * 4 * 16**2 * 128 == 524_288


@pytest.mark.parametrize(
    ("device", "dtype"),
    [("cuda", torch.bfloat16), ("cuda", torch.float32), ("H100 SXM", torch.bfloat16)],
)
def test_a_gpu_estimate_is_exact_over_every_pair(device: str, dtype: torch.dtype) -> None:
    """Flash (A100, bfloat16), memory-efficient (float32), cuDNN (H100): the row's formulas
    are 4·b·h·s²·d forward and 10·b·h·s²·d backward, exact, and give what an estimate at
    another size counts."""
    b, h, s, d = sympy.symbols("b h s d")
    grad = ("q", "k", "v")
    with kernels_of(device):
        cost = attend.estimate(b=2, h=4, s=16, d=64, dtype=dtype, grad=grad)
        other = attend.estimate(b=3, h=2, s=40, d=32, dtype=dtype, grad=grad)
    (row,) = cost.ops
    assert row.forward.formula == 4 * b * h * s**2 * d and row.forward.exact
    assert row.backward.formula == 10 * b * h * s**2 * d and row.backward.exact
    dims = {"b": 3, "h": 2, "s": 40, "d": 32}
    assert (row.forward.at(dims), row.backward.at(dims)) == (other.flops, other.backward_flops)
    assert other.flops == 4 * 3 * 2 * 40**2 * 32
