"""``scatter_reduce`` on a CPU along dim 0 with an index expanded past it (PyG's message
passing) runs torch's expanded-index kernel (``cpu_scatter_reduce_expanded_index``), not
the general one: for a mean, V reductions and a divide per value of each of the R rows the
index reaches (V + R·K), where the general kernel adds a count tensor (V adds), compares
each count with 0 and divides every output element (2·V + 2·S). A sum, product, maximum or
minimum is V in both. Which kernel ran is read from torch's profiler (the general path's
``div_`` is its own op there), the count by hand from the kernels' source.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from jaxtyping import Float, Int
from torch import Tensor
from torch.profiler import ProfilerActivity, profile

from typedflops import estimate, record

M, K = 5, 16
ROWS = torch.tensor([0, 2, 2, 0, 2, 0])  # 6 source rows into rows 0 and 2 of 5: R = 2
V = ROWS.numel() * K


def _inner_ops(body: Callable[[], Tensor]) -> list[str]:
    """The aten ops torch's profiler saw the call run, its inner ones included."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        body()
    return [event.name for event in prof.events()]


def _expanded() -> Tensor:
    return ROWS.unsqueeze(1).expand(-1, K)  # strides (1, 0)


@pytest.mark.parametrize("include_self", [True, False])
def test_a_mean_over_an_expanded_index_counts_the_rows_it_reaches(include_self: bool) -> None:
    # V = 6·16 = 96 adds, then rows 0 and 2 divided by their counts: 2·16 = 32; the general
    # kernel's 2·96 + 2·5·16 = 352 was counted for it (352 recorded, 128 ran)
    x, src = torch.zeros(M, K), torch.randn(6, K)

    def body() -> Tensor:
        return x.scatter_reduce(0, _expanded(), src, "mean", include_self=include_self)

    ran = _inner_ops(body)
    assert "aten::div_" not in ran  # (the expanded kernel divides inside, no count tensor)
    with record() as rec:
        body()
    assert (rec.total.flops, rec.total.uncounted, rec.total.assumed) == (V + 2 * K, (), ())


def test_a_mean_over_a_contiguous_index_is_the_general_kernel() -> None:
    x, src = torch.zeros(M, K), torch.randn(6, K)
    index = _expanded().contiguous()  # strides (16, 1): the general kernel

    def body() -> Tensor:
        return x.scatter_reduce(0, index, src, "mean")

    assert {"aten::scatter_add_", "aten::eq", "aten::div_"} <= set(_inner_ops(body))
    with record() as rec:
        body()
    assert rec.total.flops == 2 * V + 2 * M * K == 352


@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin"])
def test_other_reductions_cost_the_same_on_both_kernels(reduce: str) -> None:
    # an op per source value either way: the expanded kernel's update, the general one's
    x, src = torch.zeros(M, K), torch.randn(6, K)
    counts = []
    for index in (_expanded(), _expanded().contiguous()):
        with record() as rec:
            x.scatter_reduce(0, index, src, reduce)
        counts.append(rec.total.flops)
    assert counts == [V, V]


def test_calls_alike_in_shape_reaching_other_rows_are_counted_apart() -> None:
    # the same shapes, R = 2 then R = 5: 96 + 32, then 96 + 80
    x, src = torch.zeros(M, K), torch.randn(6, K)
    every = torch.tensor([0, 1, 2, 3, 4, 0]).unsqueeze(1).expand(-1, K)
    with record() as rec:
        x.scatter_reduce(0, _expanded(), src, "mean")
        x.scatter_reduce(0, every, src, "mean")
    assert rec.total.flops == (V + 2 * K) + (V + 5 * K)


def _messages(x: Tensor, ids: Tensor, src: Tensor) -> Tensor:
    index = ids.unsqueeze(1).expand(-1, src.shape[1])
    return x.scatter_reduce(0, index, src, "mean", include_self=False)


def test_an_estimate_takes_every_row_as_reached_and_says_so() -> None:
    # no values: R taken as M, an upper bound, V + M·K = 16·(m + n); the general kernel's
    # 2·16·(m + n) was given for it
    spec = (Float[Tensor, "m 16"], Int[Tensor, "n"], Float[Tensor, "n 16"])
    cost = estimate(_messages, *spec, m=5, n=6)
    assert (cost.flops, cost.exact) == (V + M * K, True)
    assert str(cost.formula) == "16*(m + n)"
    assert cost.assumed == (
        "scatter_reduce: every row of self counted as reached by the index (a mean's divides)",
    )
    with record() as rec:  # a real run where the index reaches every row: the estimate
        _messages(torch.zeros(5, 16), torch.tensor([0, 1, 2, 3, 4, 4]), torch.randn(6, 16))
    assert rec.total.flops == cost.flops


def test_an_estimate_in_a_width_is_not_exact_the_kernel_changing_at_16() -> None:
    # K < 16 runs the general kernel: no one formula in k holds on both sides
    spec = (Float[Tensor, "m k"], Int[Tensor, "n"], Float[Tensor, "n k"])
    cost = estimate(_messages, *spec, m=5, n=6, k=16)
    assert (cost.flops, cost.exact) == (V + M * K, False)
    narrow = estimate(_messages, *spec, m=5, n=6, k=8)
    assert narrow.flops == 2 * 6 * 8 + 2 * 5 * 8
