"""The torch-op counter: the matmul family against FlopCounterMode, other ops by rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sympy
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode
from typedflops.counting import MATMUL_OPS
from typedflops.recording import record

from typedflops.cost import Cost


def _recorded(fn: Callable[[], Tensor], backward: bool = False) -> Cost:
    with record() as rec:
        out = fn()
        if backward:
            out.sum().backward()
    return rec.total


def _matmul_flops(cost: Cost) -> tuple[int, int]:
    """Forward and backward FLOPs of the matmul-family ops only (FlopCounterMode's scope)."""
    ops = [op for op in cost.ops if op.op in MATMUL_OPS]
    return sum(op.flops for op in ops), sum(op.backward_flops for op in ops)


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
    forward, backward = _matmul_flops(_recorded(fn, backward=True))
    assert forward == _oracle(fn, backward=False) == 2 * B * D * K
    assert forward + backward == _oracle(fn, backward=True)


def test_nn_linear_figure_from_notes() -> None:
    linear = nn.Linear(256, 64)
    x = torch.randn(1024, 256)
    cost = _recorded(lambda: linear(x))
    assert cost.flops == 33_554_432
    assert [op.op for op in cost.ops] == ["linear"]  # counted once, not again as addmm


def test_two_layer_mlp_backward_from_spec() -> None:
    x = torch.randn(B, D)
    w1 = torch.randn(D, D, requires_grad=True)
    w2 = torch.randn(D, K, requires_grad=True)
    with record() as rec:
        h2 = (x @ w1) @ w2
    forward, backward = _matmul_flops(rec.total)
    assert forward == 167_772_160
    assert backward == 2 * B * D * (D + 2 * K)  # SPEC §3, with d_hidden = d_in
    loss = lambda: ((x @ w1) @ w2).pow(2).mean()  # noqa: E731
    assert forward + backward == _oracle(loss, backward=True) == 369_098_752
    assert h2.shape == (B, K)


def test_elementwise_and_reductions_are_counted() -> None:
    x = torch.randn(8, 16, requires_grad=True)
    cost = _recorded(lambda: torch.relu(x * 2 + 1).sum())
    assert [(op.op, op.flops) for op in cost.ops] == [
        ("mul", 128),
        ("add", 128),
        ("relu", 128),
        ("sum", 128),
    ]
    assert cost.ops[0].backward_flops == 128  # x requires grad
    assert cost.ops[3].backward_flops == 0  # the backward of a sum is a broadcast
    mean = _recorded(lambda: x.mean(dim=1))
    assert mean.flops == 128 + 8
    softmax = _recorded(lambda: F.softmax(x, dim=-1))
    assert softmax.flops == 5 * 128


def test_views_and_creation_cost_nothing_silently() -> None:
    x = torch.randn(8, 16)

    def body() -> Tensor:
        y = x.t().contiguous().view(-1).reshape(16, 8).transpose(0, 1).clone().detach()
        z = torch.zeros(2, 8, 16).unsqueeze(0).permute(1, 0, 2, 3)[0, 0]
        assert y.shape == z.shape and y.dim() == 2 and y.dtype == torch.float32
        return torch.stack([y.to(torch.float64), z.double()])

    cost = _recorded(body)
    assert cost.flops == 0 and cost.ops == () and cost.uncounted == ()


def test_unknown_arithmetic_is_listed_not_zero() -> None:
    x = torch.randn(8, 16)
    cost = _recorded(lambda: F.layer_norm(x, (16,)) + torch.var(x))
    assert any("layer_norm" in name for name in cost.uncounted)
    assert any("var" in name for name in cost.uncounted)


def test_torch_einsum_is_counted_by_pattern() -> None:
    a, b, c = (
        torch.ones(1000, 10, device="meta"),
        torch.ones(10, 1000, device="meta"),
        torch.ones(1000, 10, device="meta"),
    )
    assert _recorded(lambda: torch.einsum("ij,jk,kl->il", a, b, c)).flops == 400_000
    assert _recorded(lambda: torch.einsum("ij,jk", a, b)).flops == 2 * 1000 * 10 * 1000


def test_symbolic_formula_of_a_matmul_in_a_decorated_function() -> None:
    from typedflops.decorator import typed_flops

    @typed_flops
    def mlp(
        x: Float[Tensor, "batch d_in"],
        w1: Float[Tensor, "d_in d_hidden"],
        w2: Float[Tensor, "d_hidden d_out"],
    ) -> Float[Tensor, "batch d_out"]:
        return torch.relu(x @ w1) @ w2

    batch, d_in, d_hidden, d_out = sympy.symbols("batch d_in d_hidden d_out")
    cost = mlp.estimate(batch=B, d_in=D, d_hidden=D, d_out=K, grad=("w1", "w2"))
    expected = 2 * batch * d_in * d_hidden + batch * d_hidden + 2 * batch * d_hidden * d_out
    assert sympy.expand(cost.formula - expected) == 0
    assert cost.flops == 2 * B * D * D + B * D + 2 * B * D * K


@pytest.mark.parametrize("grad_x", [False, True])
def test_conv2d_agrees_with_flop_counter(grad_x: bool) -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 8, 3, padding=1)
    x = torch.randn(2, 3, 16, 16, requires_grad=grad_x)
    cost = _recorded(lambda: conv(x), backward=True)
    [op] = [op for op in cost.ops if op.op == "conv2d"]
    assert op.flops == _oracle(lambda: conv(x), backward=False)
    assert op.flops + op.backward_flops == _oracle(lambda: conv(x), backward=True)


def test_dropout_in_eval_mode_costs_nothing() -> None:
    x = torch.randn(4, 4)
    dropout = nn.Dropout()
    assert _recorded(lambda: dropout(x)).flops == 16
    dropout.eval()
    assert _recorded(lambda: dropout(x)).flops == 0


@pytest.mark.parametrize(
    "grads",
    [
        (True, True, True),
        (False, False, True),
        (True, False, False),
        (True, True, False),
        (False, False, False),
    ],
)
def test_attention_matches_flop_counter_forward_and_backward(
    grads: tuple[bool, bool, bool],
) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, h, s, t, d, dv = 2, 3, 5, 7, 4, 6
    q = torch.randn(b, h, s, d, requires_grad=grads[0])
    k = torch.randn(b, h, t, d, requires_grad=grads[1])
    v = torch.randn(b, h, t, dv, requires_grad=grads[2])
    # The MATH kernel is the one FlopCounterMode counts on CPU (as two batched matmuls).
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        out = F.scaled_dot_product_attention(q, k, v)
        forward = counter.get_total_flops()
        if any(grads):
            out.sum().backward()
    with record() as rec:
        F.scaled_dot_product_attention(q, k, v)
    assert rec.total.flops == forward == 2 * b * h * s * t * (d + dv)
    assert rec.total.backward_flops == counter.get_total_flops() - forward
    assert rec.total.uncounted == ()
