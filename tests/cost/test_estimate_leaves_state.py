"""estimate() leaves the user's real tensors as they were: a body that reaches a model and
an optimizer from a global (a training step) is costed without training the model, and a
global tensor the body updates in place is not updated by the dry runs.

Hand count of ``train_step``'s forward at batch b: the linear layer's product 2·8·4·b (its
bias fused in ``addmm``, not counted, as FlopCounterMode), ``pow(2)`` 4·b, the mean 4·b
adds and a divide; then SGD with momentum on the 36 parameters: the buffer's ``mul_`` and
``add_`` (36 each) and the weights' ``add_`` with its learning rate (a multiply and an
add each, 72): 72·b + 145. The record's forward is the oracle too.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import record, typed_flops

torch.manual_seed(0)
model = nn.Linear(8, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
steps = torch.zeros(())


@typed_flops
def train_step(x: Float[Tensor, "b 8"]) -> Float[Tensor, ""]:
    """One SGD step of ``model`` on ``x`` (b, 8): the loss before the step."""
    loss: Tensor = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach()


@typed_flops
def backward_only(x: Float[Tensor, "b 8"]) -> Float[Tensor, ""]:
    """The loss of ``model`` on ``x`` (b, 8), its gradients accumulated."""
    loss: Tensor = model(x).pow(2).mean()
    loss.backward()
    return loss.detach()


@typed_flops
def counted(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    """``x * 2`` (n, d), counting its calls in the global ``steps``."""
    steps.add_(1)
    return x * 2


def _state() -> list[Tensor]:
    held = [p.detach().clone() for p in model.parameters()]
    held += [
        optimizer.state[p]["momentum_buffer"].clone()
        for p in model.parameters()
        if p in optimizer.state
    ]
    return held


def test_estimating_a_training_step_does_not_train_the_model() -> None:
    train_step(torch.randn(5, 8))  # (a real step first: the momentum buffers exist)
    before = _state()
    cost = train_step.estimate(b=5)
    after = _state()
    assert len(after) == len(before) == 4
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))
    assert all(p.grad is None for p in model.parameters())
    with record() as rec:
        train_step(torch.randn(5, 8))
    assert cost.flops == rec.total.flops == 72 * 5 + 145


def test_an_estimate_leaves_no_fake_gradient_in_a_real_parameter() -> None:
    for p in model.parameters():
        p.grad = None
    backward_only.estimate(b=3)
    assert all(p.grad is None for p in model.parameters())
    x = torch.randn(3, 8)
    backward_only(x)
    expected = torch.autograd.grad(model(x).pow(2).mean(), model.weight)[0]
    assert type(model.weight.grad) is Tensor
    assert torch.allclose(model.weight.grad, expected)
    model.zero_grad()


def test_a_global_tensor_written_in_place_is_not_written_by_dry_runs() -> None:
    steps.zero_()
    cost = counted.estimate(n=4, d=8)
    assert steps.item() == 0
    counted(torch.ones(4, 8))
    assert steps.item() == 1
    with record() as rec:
        counted(torch.ones(4, 8))
    assert cost.flops == rec.total.flops
