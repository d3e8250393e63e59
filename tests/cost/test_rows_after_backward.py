"""After a backward ran inside ``record()``, each row of its per-op breakdown
(``rec.total.ops``) holds the backward that ran for its ops, so the rows sum to the total
in every field (forward FLOPs, backward FLOPs, bytes read and written): kernels whose work
values decide (targets equal to ``ignore_index``, ids equal to ``padding_idx``, margins
met), a backward over one input, a ``torch.autograd.Function``'s own backward, a backward
run twice. Each row's backward is checked against a hand count written out here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from typedflops import record
from typedflops.cost.engine.skipped_work import SKIPS
from typedflops.cost.types import Cost, OpCost

aten = torch.ops.aten
#: The row of backward ops that ran and that no row's foreseen backward holds.
UNTRACED = "(backward not traced to a row)"


def _recorded(run: Callable[[], Any]) -> Cost:
    with record() as rec:
        run()
    return rec.total


def _sums_hold(total: Cost) -> None:
    """The rows sum to the total in every field."""
    ops = total.ops
    assert sum(op.flops for op in ops) == total.flops
    assert sum(op.backward_flops for op in ops) == total.backward_flops
    assert sum(op.bytes_read for op in ops) == total.bytes_read
    assert sum(op.bytes_written for op in ops) == total.bytes_written


def _row(total: Cost, name: str) -> OpCost:
    (found,) = [op for op in total.ops if op.op == name]
    return found


def _backward_of_rows(total: Cost) -> dict[str, int]:
    found: dict[str, int] = {}
    for op in total.ops:
        found[op.op] = found.get(op.op, 0) + op.backward_flops
    return found


def _margins_met(x: Tensor, y: Tensor, margin: float = 1.0) -> int:
    """Pairs (sample, class other than its target) with ``margin - x[y] + x[i] > 0``."""
    z = margin - x.gather(1, y[:, None]) + x
    z.scatter_(1, y[:, None], 0.0)
    return int((z > 0).sum())


def test_multi_margin_loss_row_is_the_backward_that_ran() -> None:
    # (6, 5) inputs: z per value (2) and a product with the output's gradient per value:
    # 3·N·C = 90, a compare per class other than the target N·(C - 1) = 24, a subtract per
    # pair met M: 114 + M (every pair met, foreseen: 138)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, dtype=torch.float64, generator=g).requires_grad_()
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    met = _margins_met(x.detach(), y)
    assert met < 24
    total = _recorded(lambda: F.multi_margin_loss(x, y).backward())
    _sums_hold(total)
    assert _row(total, "multi_margin_loss").backward_flops == 114 + met
    assert total.backward_flops == 114 + met


def test_nll_loss_rows_count_the_targets_not_ignored() -> None:
    # nll_loss_backward puts a value per target not ignored: 4 of 6; nll_loss2d's 30 of 32
    x = torch.randn(6, 5, requires_grad=True)
    y = torch.tensor([0, -100, 2, -100, 4, 0])
    total = _recorded(lambda: F.nll_loss(x, y).backward())
    _sums_hold(total)
    assert _row(total, "nll_loss").backward_flops == 4
    images = torch.randn(2, 3, 4, 4, requires_grad=True)
    targets = torch.zeros(2, 4, 4, dtype=torch.long)
    targets[0, 0, :2] = -100
    total = _recorded(lambda: F.nll_loss(images, targets).backward())
    _sums_hold(total)
    assert _row(total, "nll_loss").backward_flops == 30


def test_embedding_rows_count_the_ids_not_padding() -> None:
    # table (7, 4), ids [0, 1, 0, 3], padding_idx 0: embedding_dense_backward adds the rows
    # of 2 ids, 2·4 = 8 (foreseen: 16); the sum's backward expands, 0
    w = torch.randn(7, 4, requires_grad=True)
    ids = torch.tensor([[0, 1, 0, 3]])
    total = _recorded(lambda: F.embedding(ids, w, padding_idx=0).sum().backward())
    _sums_hold(total)
    assert _backward_of_rows(total) == {"embedding": 8, "sum": 0, "backward": 0}


def test_embedding_bag_rows_count_the_ids_not_padding() -> None:
    # ids [0, 1, 0, 3, 2, 0] in 2 bags, padding_idx 0: 3 ids kept of 6, D = 4: the bag's
    # backward adds 3·4 = 12; with per_sample_weights a multiply more (24) and the weights'
    # gradient a multiply and an add per coordinate of each kept id, 2·3·4 = 24
    w = torch.randn(7, 4, requires_grad=True)
    ids, offsets = torch.tensor([0, 1, 0, 3, 2, 0]), torch.tensor([0, 3])
    total = _recorded(
        lambda: F.embedding_bag(ids, w, offsets, mode="sum", padding_idx=0).sum().backward()
    )
    _sums_hold(total)
    assert _row(total, "embedding_bag").backward_flops == 12
    weights = torch.rand(6, requires_grad=True)
    total = _recorded(
        lambda: (
            F.embedding_bag(ids, w, offsets, mode="sum", padding_idx=0, per_sample_weights=weights)
            .sum()
            .backward()
        )
    )
    _sums_hold(total)
    assert _row(total, "embedding_bag").backward_flops == 24 + 24
    assert UNTRACED not in _backward_of_rows(total)


def test_histc_row_has_no_backward_beside_one_that_ran() -> None:
    # histc is not differentiated: its row's backward is 0; relu's threshold_backward one
    # per value, 12
    x = torch.randn(3, 4, requires_grad=True)

    def run() -> None:
        torch.histc(x.detach(), bins=4, min=-0.5, max=0.5)
        torch.relu(x).sum().backward()

    total = _recorded(run)
    _sums_hold(total)
    assert _row(total, "histc").backward_flops == 0
    assert _row(total, "relu").backward_flops == 12


def test_every_value_skipping_op_is_covered() -> None:
    covered = {
        aten.histc,
        aten.multi_margin_loss,
        aten.multi_margin_loss_backward,
        aten.nll_loss_forward,
        aten.nll_loss2d_forward,
        aten.nll_loss_backward,
        aten.nll_loss2d_backward,
        aten.embedding_dense_backward,
        aten._embedding_bag,
        aten._embedding_bag_forward_only,
        aten._embedding_bag_backward,
        aten._embedding_bag_dense_backward,
        aten._embedding_bag_per_sample_weights_backward,
        aten.scatter_reduce,  # (test_scatter_reduce_paths.py)
        aten.scatter_reduce_,
    }
    assert set(SKIPS) == covered


def test_linear_relu_rows() -> None:
    # Linear(5, 8), ReLU, Linear(8, 3) on x (4, 5) that needs no gradient: the first
    # layer's weight gradient 2·4·5·8 = 320 and its bias 4·8 = 32; relu 4·8 = 32; the second
    # layer's input and weight gradients 2·4·8·3 = 192 each and its bias 4·3 = 12
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    x = torch.randn(4, 5)
    total = _recorded(lambda: model(x).sum().backward())
    _sums_hold(total)
    rows = [op.backward_flops for op in total.ops if op.op in ("linear", "relu")]
    assert rows == [352, 32, 396]


def test_conv_net_rows() -> None:
    # Conv2d(3, 4, 3) on (2, 3, 8, 8): 288 outputs of 2·27 FLOPs; its weight gradient (the
    # input needs none) 15,552 and its bias's 288 adds; relu 288; Conv2d(4, 2, 3, groups=2):
    # 64 outputs of 2·18, input and weight gradients 2,304 each, the bias's 64 adds
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 3, groups=2))
    x = torch.randn(2, 3, 8, 8)
    total = _recorded(lambda: model(x).sum().backward())
    _sums_hold(total)
    rows = [op.backward_flops for op in total.ops if op.op in ("conv2d", "relu")]
    assert rows == [15552 + 288, 288, 4608 + 64]


class _Product(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        a, b = ctx.saved_tensors
        return grad @ b.T, a.T @ grad


def test_custom_function_row() -> None:
    # a (3, 4) @ b (4, 5); its backward: grad (3, 5) @ b.T (5, 4) and a.T (4, 3) @ grad
    # (3, 5), 2·3·4·5 = 120 each
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(4, 5, requires_grad=True)

    def run() -> None:
        _Product.apply(a, b).sum().backward()  # type: ignore[no-untyped-call]

    total = _recorded(run)
    _sums_hold(total)
    (row,) = [op for op in total.ops if op.op.startswith("_Product")]
    assert row.backward_flops == 240
    assert total.backward_flops == 240


def test_backward_over_one_input_and_twice() -> None:
    # Linear(5, 6) on x (4, 5): a gradient for x alone is one product, 2·4·6·5 = 240
    # (foreseen: 240 for x, 240 for the weight, 24 for the bias); two passes of all: 1,008
    torch.manual_seed(0)
    layer = nn.Linear(5, 6)
    x = torch.randn(4, 5, requires_grad=True)
    total = _recorded(lambda: torch.autograd.grad(layer(x).sum(), x))
    _sums_hold(total)
    assert _row(total, "linear").backward_flops == 240

    def twice() -> None:
        y = layer(x).sum()
        y.backward(retain_graph=True)
        y.backward()

    total = _recorded(twice)
    _sums_hold(total)
    assert _row(total, "linear").backward_flops == 2 * 504
    assert UNTRACED not in _backward_of_rows(total)


def test_a_backward_op_no_row_foresees_has_a_row_of_its_own() -> None:
    # a hook's op runs in the backward pass: 2·3 = 6 multiplies; no forward row foresees it
    x = torch.randn(2, 3, requires_grad=True)

    def run() -> None:
        y = x * 1.5
        y.register_hook(lambda grad: grad * 2.0)
        y.sum().backward()

    total = _recorded(run)
    _sums_hold(total)
    assert _row(total, "mul").backward_flops == 6
    assert _row(total, UNTRACED).backward_flops == 6
    assert _row(total, UNTRACED).flops == 0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    targets=st.lists(st.integers(-1, 4), min_size=1, max_size=8),
    ids=st.lists(st.integers(0, 6), min_size=1, max_size=8),
    seed=st.integers(0, 1000),
)
def test_rows_sum_over_random_targets_and_ids(
    targets: list[int], ids: list[int], seed: int
) -> None:
    # -1 stands for an ignored target; id 0 is the padding
    g = torch.Generator().manual_seed(seed)
    y = torch.tensor([-100 if t < 0 else t for t in targets])
    x = torch.randn(len(targets), 5, dtype=torch.float64, generator=g).requires_grad_()
    total = _recorded(lambda: F.nll_loss(x, y, reduction="sum").backward())
    _sums_hold(total)
    assert _row(total, "nll_loss").backward_flops == sum(t >= 0 for t in targets)
    kept = y.clamp(min=0)
    met = _margins_met(x.detach(), kept)
    total = _recorded(lambda: F.multi_margin_loss(x, kept).backward())
    _sums_hold(total)
    samples = len(targets)
    assert _row(total, "multi_margin_loss").backward_flops == 3 * samples * 5 + samples * 4 + met
    w = torch.randn(7, 4, generator=g).requires_grad_()
    found = torch.tensor(ids)
    total = _recorded(lambda: F.embedding(found, w, padding_idx=0).sum().backward())
    _sums_hold(total)
    assert _row(total, "embedding").backward_flops == 4 * sum(i != 0 for i in ids)
