"""A dry run on ``meta`` that reaches the user's real tensors (a model, its optimizer and a
step counter used from globals, a buffer the body updates in place) leaves every one of
them and every ``.grad`` as it was, values and identity; and a dispatch mode under the
dry run's counting mode (one the user holds around ``estimate()``, the dry run's own that
keeps real tensors) changes nothing it counts: a ``torch.autograd.Function``'s backward
is counted as without it.

The oracles: copies of every real tensor taken before the estimate, and a record of a real
run. Hand count of ``_Doubled``'s backward at batch 4 (``nn.Linear(8, 8)`` layers, the input
needing no grad): the second layer 2·4·8·8 for its weight, as much for its input and 4·8
for its bias (1,056), the Function's 4·8 multiplies, the first layer's 544 (no input
gradient).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import estimate, record, typed_flops
from typedflops.cost.engine import runs

torch.manual_seed(0)
MODEL = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 1))
# (foreach: its in-place ops return no tensor, so they run on the real tensors themselves)
OPTIMIZER = torch.optim.SGD(MODEL.parameters(), lr=0.1, momentum=0.9, foreach=True)
STEPS = torch.zeros((), dtype=torch.int64)
SEEN = torch.zeros(8)


@typed_flops
def step(x: Float[Tensor, "n d"]) -> Float[Tensor, ""]:
    """The loss of ``MODEL`` on ``x`` (n, d), then an SGD step on the gradients held, the
    gradients let go: counted in ``STEPS``, the batch's mean kept in ``SEEN`` (d)."""
    STEPS.add_(1)
    SEEN.mul_(0.5).add_(x.mean(0))
    loss: Tensor = MODEL(x).pow(2).mean()  # (batch norm's running statistics written in place)
    OPTIMIZER.step()  # (the real momentum buffers and weights)
    OPTIMIZER.zero_grad()  # (sets every .grad to None: no op a dispatch mode sees)
    return loss.detach()


def _held() -> dict[str, Any]:
    """Every real tensor the body reaches, and each parameter's ``.grad`` (the tensor
    object itself too)."""
    held: dict[str, Any] = {"steps": STEPS.clone(), "seen": SEEN.clone()}
    for name, tensor in MODEL.state_dict().items():
        held[name] = tensor.clone()
    for index, parameter in enumerate(MODEL.parameters()):
        held[f"grad {index}"] = (
            parameter.grad,
            None if parameter.grad is None else parameter.grad.clone(),
        )
        buffer = OPTIMIZER.state[parameter].get("momentum_buffer")
        held[f"momentum {index}"] = None if buffer is None else buffer.clone()
    return held


def _same(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    changed = []
    for key, was in before.items():
        now = after[key]
        if isinstance(was, tuple):  # (a .grad: the same tensor, the same values)
            if was[0] is not now[0] or (was[1] is not None and not torch.equal(was[1], now[1])):
                changed.append(key)
        elif was is None or now is None:
            if (was is None) != (now is None):
                changed.append(key)
        elif was.device != now.device or not torch.equal(was, now):
            changed.append(key)
    return changed


def test_a_dry_run_on_meta_leaves_every_real_tensor_and_grad_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for _ in range(2):  # (real steps: momentum buffers, running statistics, gradients)
        MODEL(torch.randn(4, 8)).sum().backward()
        step(torch.randn(4, 8))
    MODEL(torch.randn(4, 8)).sum().backward()
    fake_runs: list[bool] = []
    run_once = runs.run_once

    def noted(probe: Any, assignment: Any, *, fake: bool = False, **options: Any) -> Any:
        fake_runs.append(fake)
        return run_once(probe, assignment, fake=fake, **options)

    monkeypatch.setattr(runs, "run_once", noted)
    before = _held()
    cost = step.estimate(n=4, d=8)
    assert fake_runs and not any(fake_runs)  # (every run on meta)
    assert _same(before, _held()) == []
    assert all(p.grad is not None for p in MODEL.parameters())
    with record() as rec:
        step(torch.randn(4, 8))
    assert cost.flops == rec.total.flops


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad * 2


class _Doubled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.b(_Double.apply(self.a(x)))  # type: ignore[no-untyped-call]
        return out


def test_a_mode_under_the_counting_mode_leaves_a_functions_backward_counted() -> None:
    model = _Doubled()
    alone = estimate(model, Float[Tensor, "batch d"], batch=4, d=8)
    with FlopCounterMode(display=False):  # (held by the user: below the dry run's modes)
        held = estimate(model, Float[Tensor, "batch d"], batch=4, d=8)
    with record() as rec:
        model(torch.randn(4, 8)).sum().backward()
    expected = 1056 + 32 + 544
    assert rec.total.backward_flops == expected
    for cost in (alone, held):
        assert (cost.backward_flops, cost.uncounted, cost.exact) == (expected, (), True)
