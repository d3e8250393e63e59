"""The dispatch-level counter: the matmul family against FlopCounterMode, other ops by rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

import typedflops
from typedflops import record
from typedflops.cost.engine.recorder import torch_counts
from typedflops.cost.types import Cost


def _recorded(fn: Callable[[], Tensor]) -> Cost:
    with record() as rec:
        fn()
    return rec.total


def _torch_counted(fn: Callable[[], Tensor]) -> tuple[int, int]:
    """Forward and predicted backward FLOPs on the kernels FlopCounterMode counts."""
    with record() as rec:
        fn()
    return torch_counts(rec.session.root)


def _oracle(fn: Callable[[], Tensor], backward: bool) -> int:
    with FlopCounterMode(display=False) as counter:
        out = fn()
        if backward:
            out.sum().backward()
    return int(counter.get_total_flops())


B, D, K = 1024, 256, 64


def _case(name: str, grad_x: bool) -> Callable[[], Tensor]:
    torch.manual_seed(0)
    x3 = torch.randn(4, B // 4, D, requires_grad=grad_x)
    x = torch.randn(B, D, requires_grad=grad_x)
    w = torch.randn(D, K, requires_grad=True)
    bias = torch.randn(K, requires_grad=True)
    linear = nn.Linear(D, K)
    cases: dict[str, Callable[[], Tensor]] = {
        "x @ w": lambda: x @ w,
        "torch.matmul 3-D": lambda: torch.matmul(x3, w),
        "torch.mm": lambda: torch.mm(x, w),
        "torch.bmm": lambda: torch.bmm(x3, w.expand(4, D, K)),
        "F.linear with bias": lambda: F.linear(x, w.t(), bias),
        "nn.Linear": lambda: linear(x),
        "nn.Linear 3-D": lambda: linear(x3),
        "addmm": lambda: torch.addmm(bias, x, w),
    }
    return cases[name]


CASES = [
    "x @ w",
    "torch.matmul 3-D",
    "torch.mm",
    "torch.bmm",
    "F.linear with bias",
    "nn.Linear",
    "nn.Linear 3-D",
    "addmm",
]


@pytest.mark.parametrize("grad_x", [False, True])
@pytest.mark.parametrize("name", CASES)
def test_matmul_family_agrees_with_flop_counter(name: str, grad_x: bool) -> None:
    fn = _case(name, grad_x)
    forward, backward = _torch_counted(fn)
    assert forward == _oracle(fn, backward=False) == 2 * B * D * K
    assert forward + backward == _oracle(fn, backward=True)


def test_nn_linear_figure_and_name() -> None:
    linear = nn.Linear(256, 64)
    x = torch.randn(1024, 256)
    cost = _recorded(lambda: linear(x))
    assert cost.flops == 33_554_432
    assert [op.op for op in cost.ops] == ["linear"]  # the call the user made, not its kernels


def test_two_layer_mlp_backward() -> None:
    x = torch.randn(B, D)
    w1 = torch.randn(D, D, requires_grad=True)
    w2 = torch.randn(D, K, requires_grad=True)
    forward, backward = _torch_counted(lambda: (x @ w1) @ w2)
    assert forward == 167_772_160
    assert backward == 2 * B * D * (D + 2 * K)  # grad of w1, of h and of w2
    loss = lambda: ((x @ w1) @ w2).pow(2).mean()  # noqa: E731
    assert forward + backward == _oracle(loss, backward=True) == 369_098_752


def test_elementwise_and_reductions_by_convention() -> None:
    x = torch.randn(8, 16, requires_grad=True)
    cost = _recorded(lambda: torch.relu(x * 2 + 1).sum())
    assert [(op.op, op.flops) for op in cost.ops] == [
        ("mul", 128),
        ("add", 128),
        ("relu", 128),
        ("sum", 128),
    ]
    # Backward is what autograd runs: mul's a multiply per element, add's nothing,
    # relu's a select-multiply per element, sum's a broadcast (nothing).
    assert [op.backward_flops for op in cost.ops] == [128, 0, 128, 0]
    mean = _recorded(lambda: x.mean(dim=1))
    assert (mean.flops, mean.backward_flops) == (128 + 8, 128)


def test_integer_and_boolean_ops_cost_nothing() -> None:
    mask = torch.ones(5, dtype=torch.bool)
    counter = torch.tensor(0)
    ids = torch.arange(6)

    def body() -> Tensor:
        counter.add_(1)  # BatchNorm's num_batches_tracked += 1
        return (~mask).sum() + (ids * 2).sum()

    cost = _recorded(body)
    assert cost.flops == 0 and cost.uncounted == ()


def test_integers_computed_in_floating_point_are_counted() -> None:
    # a sinusoidal table's frequencies: integers divided, scaled, rooted and summed at a
    # floating-point dtype are computed in floating point, at the result's dtype
    ids = torch.arange(6)
    body: list[tuple[Callable[[], Tensor], int]] = [
        (lambda: ids / 6, 6),
        (lambda: ids * 0.5, 6),
        (lambda: ids.sqrt(), 6),
        (lambda: torch.exp(ids), 6),
        (lambda: ids**0.5, 6),
        (lambda: ids.sum(dtype=torch.float32), 6),
        (lambda: ids.mean(dtype=torch.float64), 6 + 1),
        (lambda: ids.cumsum(0, dtype=torch.float32), 6),
        (lambda: ids * 1j, 6 * 6),  # a complex multiply
        (lambda: ids // 2, 0),  # integers still
        (lambda: ids.sum(), 0),
    ]
    assert [_recorded(fn).flops for fn, _ in body] == [flops for _, flops in body]

    def frequencies(positions: Int[Tensor, " n"]) -> Float[Tensor, " n"]:
        return 1.0 / 10000 ** (positions / positions.shape[0])

    # a divide, a power, and ``1.0 / t`` as torch runs it: a reciprocal and a multiply
    cost = typedflops.estimate(frequencies, Int[Tensor, " n"], n=8)
    assert (cost.flops, str(cost.formula)) == (4 * 8, "4*n")
    assert _recorded(lambda: frequencies(torch.arange(8))).flops == 4 * 8


def test_batch_norm_counts_its_arithmetic_not_its_counter() -> None:
    norm = nn.BatchNorm1d(4)
    x = torch.randn(8, 4)
    cost = _recorded(lambda: norm(x))
    assert cost.flops == (5 + 2) * 8 * 4  # training: statistics, normalize, affine
    norm.eval()
    assert _recorded(lambda: norm(x)).flops == (2 + 2) * 8 * 4


def test_reflected_operators_are_counted() -> None:
    x = torch.randn(3, 4)
    assert _recorded(lambda: 1.0 / x).flops == 2 * 12  # reciprocal, then the scale
    assert _recorded(lambda: 2.0 - x).flops == 12
    assert _recorded(lambda: 2.0**x).flops == 12


def test_einsum_is_counted_as_torch_runs_it() -> None:
    a, b = torch.randn(2, 3, 4), torch.randn(3, 5)
    cost = _recorded(lambda: torch.einsum("ijh,jk->ik", a, b))
    # torch sums h out first (2*3*4 adds), then multiplies a 2x3 by a 3x5 matrix.
    assert cost.flops == 2 * 3 * 4 + 2 * 2 * 3 * 5
    assert _oracle(lambda: torch.einsum("ijh,jk->ik", a, b), backward=False) == 2 * 2 * 3 * 5


def test_raw_three_operand_einsum_counts_torch_order() -> None:
    a, b, c = torch.randn(100, 10), torch.randn(10, 100), torch.randn(100, 10)

    def chain() -> Tensor:
        return torch.einsum("ij,jk,kl->il", a, b, c)

    forward, _ = _torch_counted(chain)
    assert forward == _oracle(chain, backward=False)


def test_conv_transpose_is_counted_like_flop_counter() -> None:
    conv = nn.ConvTranspose2d(3, 5, kernel_size=3, stride=2)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    forward, backward = _torch_counted(lambda: conv(x))
    assert forward == _oracle(lambda: conv(x), backward=False) > 0
    # and the bias's gradient, the output's gradient (2, 5, 17, 17) summed to (5,): an add
    # per element, which FlopCounterMode does not count
    assert forward + backward == _oracle(lambda: conv(x), backward=True) + 2 * 5 * 17 * 17


def test_ops_without_a_rule_are_named() -> None:
    x = torch.randn(8)
    cost = _recorded(lambda: torch.fft.rfft(x).real)
    assert cost.uncounted == ("_fft_r2c",)
    with record() as rec:
        torch.fft.rfft(x)
    assert "uncounted ops (ran, no FLOP rule): _fft_r2c" in rec.table()


def test_a_backward_run_inside_record_is_not_counted_again() -> None:
    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(2, 4)
    with record() as rec:
        (x @ w).sum().backward()
    assert rec.total.flops == 2 * 2 * 4 * 3 + 2 * 3  # the matmul and the sum
    assert rec.total.backward_flops == 2 * 2 * 4 * 3  # predicted per forward op


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize(
    "layout",
    [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr],
    ids=["coo", "csr", "csc", "bsr"],
)
def test_sparse_tensors_of_every_layout_are_recorded_by_their_stored_values(
    layout: torch.layout,
) -> None:
    # a record used to fail on a compressed layout (asking CSR for COO's `_values()`)
    dense = torch.zeros(4, 6)
    dense[:2, :2] = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    blocks = (2, 2) if layout is torch.sparse_bsr else None
    sparse = dense.to_sparse(layout=layout, blocksize=blocks)
    stored = sparse._values() if layout is torch.sparse_coo else sparse.values()
    total = _recorded(lambda: sparse * 2.0)
    assert total.flops == stored.numel() == 4  # a multiply per stored value
    product = _recorded(lambda: sparse @ torch.randn(6, 3))
    assert product.flops == 0 and "mm" in product.uncounted  # no rule: named, not a 0
