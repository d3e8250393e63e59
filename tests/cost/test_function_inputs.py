"""A ``torch.autograd.Function`` in the middle of a model: what made its inputs reaches
backward through it (its forward runs with autograd off, so op by op its inputs look read
off the graph). Full backward hooks (``register_full_backward_hook``) and reentrant
checkpointing pass a module's tensors through such Functions.

Hand counts, batch 4, ``nn.Linear(8, 8)`` layers, the input needing no grad: a layer
whose output needs its input's gradient costs 2·4·8·8 = 512 for the weight's gradient, 512
for the input's and 32 for the bias's; the first layer 544 (no input gradient).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils.checkpoint as checkpoint
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import estimate, record
from typedflops.cost.engine import function_inputs, stack

_X = Float[Tensor, "batch d"]


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad * 2


class _Same(torch.autograd.Function):
    """Returns its input as it is: autograd makes a view of it, its forward runs no op."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad


class _Two(nn.Module):
    def __init__(self, body: Callable[[_Two, Tensor], Tensor]) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.body = body

    def forward(self, x: Tensor) -> Tensor:
        return self.body(self, x)


def _ran(model: nn.Module) -> int:
    """The backward a record of a real run counts as it runs."""
    with record() as rec:
        model(torch.randn(4, 8)).sum().backward()
    return rec.total.backward_flops


def _double(m: _Two, x: Tensor) -> Tensor:
    return m.b(_Double.apply(m.a(x)))  # type: ignore[no-any-return, no-untyped-call]


def _chained(m: _Two, x: Tensor) -> Tensor:
    return m.b(_Same.apply(_Double.apply(m.a(x))))  # type: ignore[no-any-return, no-untyped-call]


def _read_twice(m: _Two, x: Tensor) -> Tensor:
    h = m.a(x)
    return m.b(_Double.apply(h) + h)  # type: ignore[no-any-return, no-untyped-call]


def _dead(m: _Two, x: Tensor) -> Tensor:
    _Double.apply(m.a(x))  # type: ignore[no-untyped-call]
    return m.b(x)  # type: ignore[no-any-return]


def _checkpointed(m: _Two, x: Tensor) -> Tensor:
    return m.b(checkpoint.checkpoint(torch.relu, m.a(x), use_reentrant=True))  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("body", "backward"),
    [
        # b's 1,056, the Function's 32 multiplies, a's 544
        (_double, 1056 + 32 + 544),
        (_chained, 1056 + 32 + 544),
        # h's two gradients summed: 32 adds
        (_read_twice, 1056 + 32 + 32 + 544),
        # the Function's output is let go: a reaches no backward, b's input needs no grad
        (_dead, 544),
        # relu's backward 32, a's 544
        (_checkpointed, 1056 + 32 + 544),
    ],
)
def test_what_a_function_reads_reaches_backward_through_it(
    body: Callable[[_Two, Tensor], Tensor], backward: int
) -> None:
    model = _Two(body)
    cost = estimate(model, _X, batch=4, d=8)
    assert cost.backward_flops == backward
    assert cost.exact
    assert _ran(model) == backward


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_full_backward_hooks_keep_the_layers_before_them() -> None:
    # The hooks pass the module's inputs and outputs through a Function
    # (BackwardHookFunction) that returns them as they are.
    on_layer = _Two(lambda m, x: m.b(m.a(x)))
    on_layer.a.register_full_backward_hook(lambda module, grad_in, grad_out: None)
    on_model = _Two(lambda m, x: m.b(m.a(x)))
    on_model.register_full_backward_hook(lambda module, grad_in, grad_out: None)
    for model in (on_layer, on_model):
        cost = estimate(model, _X, batch=4, d=8)
        assert cost.backward_flops == 1056 + 544 == _ran(model)
        assert estimate(model, _X, batch=4, d=8, grad=("x",)).backward_flops == 1056 + 1056


def test_a_function_run_under_no_grad_reaches_nothing() -> None:
    def body(m: _Two, x: Tensor) -> Tensor:
        h = m.a(x)
        with torch.no_grad():
            t = _Double.apply(h)  # type: ignore[no-untyped-call]
        return m.b(x) + t  # type: ignore[no-any-return]

    model = _Two(body)
    assert estimate(model, _X, batch=4, d=8).backward_flops == 544 == _ran(model)


def test_ops_under_no_grad_look_for_no_function(monkeypatch: pytest.MonkeyPatch) -> None:
    # Function.apply runs its forward with forward AD off too, which torch.no_grad() leaves
    # on: ops under no_grad alone do not look up the stack for an apply (while the held
    # output's edges wait, every op is asked whether it runs inside one).
    looked: list[object] = []
    real = stack.frame_of

    def counted(*args: Any) -> Any:
        looked.append(args[0])
        return real(*args)

    monkeypatch.setattr(function_inputs, "frame_of", counted)
    with_function, plain = _Two(_double), _Two(lambda m, x: m.b(m.a(x)))
    x = torch.randn(4, 8)
    with record() as rec:
        held = with_function(x)
        assert looked  # (the Function's own op, x * 2, is looked for)
        looked.clear()
        with torch.no_grad():
            plain(x)
        assert looked == []
        with torch.no_grad():
            _Double.apply(x)  # type: ignore[no-untyped-call]
        assert len(looked) == 1  # (under no_grad, inside a Function: looked for, as before)
    with FlopCounterMode(display=False) as torch_counts:
        with_function(x)
        with torch.no_grad():
            plain(x)
            _Double.apply(x)  # type: ignore[no-untyped-call]
    # four addmm of 2·4·8·8 (two models of two layers), and x * 2 twice (32 each)
    assert torch_counts.get_total_flops() == 4 * 512
    assert rec.total.flops == 4 * 512 + 2 * 32
    # held's backward, as in test_what_a_function_reads_reaches_backward_through_it
    assert rec.total.backward_flops == 1056 + 32 + 544
    del held


class _Tied(nn.Module):
    """A weight read by a Function and by a plain op: the Function is the record's first
    op needing grad, on a leaf (nothing waits yet when its forward runs)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: Tensor) -> Tensor:
        return x @ _Double.apply(self.w) + x @ self.w  # type: ignore[no-any-return, no-untyped-call]


class _Residual(nn.Module):
    """A reentrant checkpoint of a layer over an input needing grad, and the input added."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x: Tensor) -> Tensor:
        return checkpoint.checkpoint(self.a, x, use_reentrant=True) + x  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("model", "grad", "backward"),
    [
        # the two weight gradients 2·(2·4·8·8), the Function's 64 multiplies, and w's two
        # gradients summed: 64 adds
        (_Tied(), False, 1024 + 64 + 64),
        # a's weight and input gradients 512 each, its bias's 32, x's two gradients summed:
        # 32 adds
        (_Residual(), True, 512 + 512 + 32 + 32),
    ],
)
def test_a_leaf_a_function_reads_first_sums_its_gradients_in_a_record(
    model: nn.Module, grad: bool, backward: int
) -> None:
    cost = estimate(model, _X, batch=4, d=8, grad=("x",) if grad else ())
    assert (cost.backward_flops, cost.exact) == (backward, True)
    x = torch.randn(4, 8, requires_grad=grad)
    with record() as predicted:  # (no backward runs: the prediction)
        model(x)
    assert (predicted.total.backward_flops, predicted.total.exact) == (backward, True)
    with record() as ran:  # (a backward runs: counted as it runs, the prediction's)
        model(x).sum().backward()
    assert (ran.total.backward_flops, ran.total.exact) == (backward, True)
