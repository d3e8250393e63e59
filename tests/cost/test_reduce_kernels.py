"""``scatter_reduce`` counted as its kernel runs (``TensorAdvancedIndexing.cpp``,
``scatter_reduce_two``): one op per index entry for every reduction (a sum's add, a
product's multiply, a maximum's or minimum's compare, a mean's add); a mean then builds a
count per output element (ones scattered up, one add per index entry), compares each count
with 0 (empty ones become 1) and divides each output element by its count. FlopCounterMode
has no formula for it (it counts 0)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record


def _counted(reduce: str, include_self: bool, rows: int, entries: int, width: int) -> int:
    generator = torch.Generator().manual_seed(rows * 100 + entries)
    out = torch.randn(rows, width, dtype=torch.float64)
    index = torch.randint(0, rows, (entries, width), generator=generator)
    src = torch.randn(entries, width, dtype=torch.float64)
    with record() as rec:
        torch.scatter_reduce(out, 0, index, src, reduce, include_self=include_self)
    return rec.total.flops


def test_each_reduction_counts_an_op_per_index_entry_and_a_mean_its_count_and_divide() -> None:
    # (5, 3) output, (4, 3) index: 12 entries, 15 output elements
    for include_self in (True, False):
        for reduce in ("sum", "prod", "amax", "amin"):
            assert _counted(reduce, include_self, 5, 4, 3) == 12, (reduce, include_self)
        # 12 adds of the values, 12 adds into the counts, 15 compares, 15 divides
        assert _counted("mean", include_self, 5, 4, 3) == 12 + 12 + 15 + 15


def test_integer_scatters_count_nothing_and_flop_counter_mode_counts_none() -> None:
    out = torch.zeros(4, 2, dtype=torch.int64)
    index = torch.tensor([[0, 1], [3, 3]])
    with record() as rec:
        torch.scatter_reduce(out, 0, index, torch.ones(2, 2, dtype=torch.int64), "mean")
    assert rec.total.flops == 0
    with FlopCounterMode(display=False) as theirs:
        torch.scatter_reduce(torch.zeros(4, 2), 0, index, torch.ones(2, 2), "mean")
    assert theirs.get_total_flops() == 0


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 4), st.booleans())
def test_a_mean_scatter_counts_twice_its_entries_and_twice_its_output(
    rows: int, entries: int, width: int, include_self: bool
) -> None:
    expected = 2 * entries * width + 2 * rows * width
    assert _counted("mean", include_self, rows, entries, width) == expected


def _index_reduced(reduce: str, include_self: bool, rows: int, ids: tuple[int, ...]) -> int:
    out = torch.randn(rows, 3, dtype=torch.float64)
    source = torch.randn(len(ids), 3, dtype=torch.float64)
    with record() as rec:
        out.index_reduce(0, torch.tensor(ids), source, reduce, include_self=include_self)
    return rec.total.flops


def test_index_reduce_counts_an_op_per_source_value_and_a_mean_its_count_and_divide() -> None:
    # (5, 3) output, 4 ids, (4, 3) source: 12 source values, 15 output elements
    for include_self in (True, False):
        for reduce in ("prod", "amax", "amin"):
            assert _index_reduced(reduce, include_self, 5, (0, 2, 2, 4)) == 12, reduce
        # 12 adds of the values, 12 adds of ones into the counts, 15 compares, 15 divides
        assert _index_reduced("mean", include_self, 5, (0, 2, 2, 4)) == 12 + 12 + 15 + 15


def test_index_reduce_in_place_counts_as_out_of_place_and_flop_counter_mode_counts_none() -> None:
    out = torch.randn(5, 3, dtype=torch.float64)
    source = torch.randn(4, 3, dtype=torch.float64)
    index = torch.tensor([0, 2, 2, 4])
    with record() as rec:
        out.index_reduce_(0, index, source, "mean")
    assert rec.total.flops == 12 + 12 + 15 + 15
    with FlopCounterMode(display=False) as theirs:
        out.index_reduce(0, index, source, "mean")
    assert theirs.get_total_flops() == 0


def _embedding_backward(padding_idx: int | None, scale_grad_by_freq: bool) -> int:
    ids = torch.tensor([[1, 1, 2], [3, 1, 0]])
    weight = torch.randn(6, 3, requires_grad=True)
    with record() as rec:
        torch.nn.functional.embedding(
            ids, weight, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq
        ).sum().backward()
    assert weight.grad is not None
    return rec.total.backward.count


def test_embedding_scaled_by_frequency_counts_a_divide_per_id_and_a_multiply_per_value() -> None:
    # 6 ids, rows of 3: 18 adds; scaled, 6 divides (1 by each id's count) and 18 multiplies
    assert _embedding_backward(None, False) == 18
    assert _embedding_backward(None, True) == 18 + 18 + 6
    # padding_idx=1 skips 3 of the 6 ids: 9 adds, 9 multiplies, 3 divides
    assert _embedding_backward(1, True) == 9 + 9 + 3
