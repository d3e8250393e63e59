"""``record()`` keeps an op's event by what decides its count; calls alike in every part of
the key but one their rule reads are counted each as it ran, as FlopCounterMode counts them.

A jagged batch's flash attention kernel (CUDA's, run here on ``meta`` tensors with the
offsets on the CPU, as a device gives them to it): FlopCounterMode's rule counts each
sequence at its length, ``4·h·s²·d`` for one of length ``s`` with ``h`` heads of width
``d``. With h = 2, d = 8: 64·s², so lengths 4, 4, 1 cost 64·33 = 2,112 and 4, 3, 2 (the same
9 tokens, the same longest sequence) 64·29 = 1,856.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record

HEADS, WIDTH = 2, 8


def _jagged_attention(lengths: list[int]) -> None:
    tokens = sum(lengths)
    query = torch.empty(tokens, HEADS, WIDTH, device="meta", dtype=torch.float16)
    offsets = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    longest = max(lengths)
    torch.ops.aten._flash_attention_forward(
        query, query, query, offsets, offsets, longest, longest, 0.0, False, False
    )


def _hand(lengths: list[int]) -> int:
    return sum(4 * HEADS * s * s * WIDTH for s in lengths)


def test_jagged_attention_of_one_shape_counts_each_batch_as_it_ran() -> None:
    with record() as rec:
        _jagged_attention([4, 4, 1])
        _jagged_attention([4, 3, 2])
    assert (_hand([4, 4, 1]), _hand([4, 3, 2])) == (2112, 1856)
    assert rec.total.flops == 2112 + 1856
    with record() as later:  # (a later record keeps no count of an earlier one's batches)
        _jagged_attention([4, 3, 2])
    assert later.total.flops == 1856


@settings(max_examples=20, deadline=None)
@given(st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=4), min_size=1, max_size=4))
def test_jagged_attention_total_is_the_sum_of_its_batches(batches: list[list[int]]) -> None:
    with FlopCounterMode(display=False) as counter, record() as rec:
        for lengths in batches:
            _jagged_attention(lengths)
    expected = sum(_hand(lengths) for lengths in batches)
    assert rec.total.flops == counter.get_total_flops() == expected


# An integer tensor of 1,000 values (8,000 bytes) times a Python number: 2 keeps integers
# (8,000 bytes written), 2.0 makes float32 (4,000); a bool tensor (1,000 bytes) times True
# stays bool (1,000), times 1 is int64 (8,000). Equal numbers of other types are other ops.
_INTEGERS = torch.arange(1000)
_BOOLS = torch.ones(1000, dtype=torch.bool)


@pytest.mark.parametrize(
    ("tensor", "first", "second", "written"),
    [
        (_INTEGERS, 2, 2.0, 8000 + 4000),
        (_INTEGERS, 2.0, 2, 4000 + 8000),
        (_BOOLS, True, 1, 1000 + 8000),
        (_INTEGERS, 1, 1.0, 8000 + 4000),
    ],
)
def test_equal_numbers_of_other_types_are_keyed_apart(
    tensor: torch.Tensor, first: float, second: float, written: int
) -> None:
    with record() as rec:
        tensor * first
        tensor.pow(first)
    with record() as again:  # (events kept from the record before are not this one's)
        tensor * second
        tensor.pow(second)
    assert rec.total.bytes_written + again.total.bytes_written == 2 * written
    assert again.total.bytes_read == 2 * tensor.numel() * tensor.element_size()


def test_a_norms_order_is_keyed_by_value_as_it_chooses_the_backward() -> None:
    # x of 3x5, a norm over its rows (3 of them); autograd runs, per order:
    # 2: x / norm 15, norm == 0 3, times the gradient 15: 33;
    # inf: |x| 15, == max 15, the count's divide 3, mask times the gradient 15, sgn 15,
    #   times 15: 78;
    # 0.5: |x| 15, its power 15, == 0 15, sgn 15, times 15, the norm's power 3, two more
    #   products 30: 108.
    x = torch.randn(3, 5, requires_grad=True)
    hand = {2.0: 33, float("inf"): 78, 0.5: 108}
    for order in (float("inf"), 0.5, 2.0, float("inf")):
        with record() as rec:
            torch.linalg.vector_norm(x, ord=order, dim=1).sum().backward()
        (row,) = [op for op in rec.total.ops if op.op == "linalg_vector_norm"]
        assert (row.forward.count, row.backward.count) == (33, hand[order])
        assert rec.total.backward_flops == hand[order]
