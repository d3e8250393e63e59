"""A body that takes a gradient with ``create_graph=True`` (a gradient penalty, forces
trained with their energy, a Hessian-vector product, a double backward) is estimated as
a real run counts it: the backward predicted over the call's graph holds the sums where
a gradient of the penalty's graph meets one of the forward's in the same tensor (a saved
tensor the penalty's backward reads again: a weight's transpose, a tanh's output), and the
backward of the forward ops the penalty's graph alone reaches (a critic's layers on the
mixed batch, whose output no loss reads). The oracle is a record of a real run (its
backward as it ran), at the estimate's sizes and at others (a formula marked exact).

Hand count, ``_penalty`` at ``n`` rows, an 8-by-8 weight ``w`` (``out = x @ w.T``): the
body's backward, ``x``'s gradient ``ones @ w``, 2·n·8·8; the predicted backward of
``out.sum() + g.pow(2).sum()``: ``out``'s product, 2·(2·n·8·8) for ``x`` and ``w``; the
square's 3·n·8; ``g = ones @ w``'s product for ``w``, 2·n·8·8; and the sum where ``w.T``'s
two gradients meet, 8·8: 536·n + 64 in all (2,208 at n = 4; 2,144 counted before, the 64
adds missing).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import Cost, estimate, record, typed_flops

torch.manual_seed(0)
_LAYER = nn.Linear(8, 8, bias=False)
_CRITIC = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
_MLP = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
_POTENTIAL = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
_W = torch.randn(8, 8, requires_grad=True)


@typed_flops
def _penalty(x: Float[Tensor, "n d"]) -> Float[Tensor, ""]:
    out: Tensor = _LAYER(x)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    return out.sum() + g.pow(2).sum()


@typed_flops
def _penalty_alone(x: Float[Tensor, "n d"]) -> Float[Tensor, ""]:
    """The penalty's graph alone reaches the first call's weight transpose."""
    x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(_LAYER(x).sum(), x, create_graph=True)
    again: Tensor = _LAYER(x)
    return again.sum() + g.pow(2).sum()


@typed_flops
def _wgan_gp(real: Float[Tensor, "n d"], fake: Float[Tensor, "n d"]) -> Float[Tensor, ""]:
    """A critic's loss with a gradient penalty on a mix of the two batches (WGAN-GP)."""
    eps = torch.rand(real.shape[0], 1)
    mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
    (g,) = torch.autograd.grad(_CRITIC(mixed).sum(), mixed, create_graph=True)
    penalty: Tensor = (g.norm(2, dim=1) - 1).pow(2).mean()
    on_fake: Tensor = _CRITIC(fake)
    on_real: Tensor = _CRITIC(real)
    return on_fake.mean() - on_real.mean() + penalty * 10


@typed_flops
def _double_backward(x: Float[Tensor, "n d"]) -> Float[Tensor, ""]:
    """A two-layer MLP with tanh, its output and its input gradient both in the loss."""
    x = x.detach().requires_grad_(True)
    y: Tensor = _MLP(x)
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    return y.pow(2).sum() + g.pow(2).sum()


@typed_flops
def _hvp(x: Float[Tensor, "n d"], v: Float[Tensor, "d d"]) -> Float[Tensor, "d d"]:
    """A Hessian-vector product of a loss in ``_W``."""
    loss = torch.tanh(x @ _W).pow(2).sum()
    (g,) = torch.autograd.grad(loss, _W, create_graph=True)
    (hv,) = torch.autograd.grad(g, _W, v)
    return hv


@typed_flops
def _forces_and_energy(
    pos: Float[Tensor, "atoms 3"],
    energy_ref: Float[Tensor, ""],
    forces_ref: Float[Tensor, "atoms 3"],
) -> Float[Tensor, ""]:
    """A machine-learned potential's loss on its energy and its forces (the energy's
    gradient by the positions)."""
    pos = pos.detach().requires_grad_(True)
    energy: Tensor = _POTENTIAL(pos).sum()
    (g,) = torch.autograd.grad(energy, pos, create_graph=True)
    return (energy - energy_ref) ** 2 + ((-g - forces_ref) ** 2).mean()


def _energy(w: Tensor, x: Tensor) -> Tensor:
    return torch.tanh(x @ w).pow(2).sum()


@typed_flops
def _grad_of_grad(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "d d"]:
    """``torch.func.grad`` of a loss of ``torch.func.grad``: a gradient of a gradient."""
    inner = torch.func.grad(_energy)
    found: Tensor = torch.func.grad(lambda w: inner(w, x).pow(2).sum())(w)
    return found


_Case = tuple[Callable[..., Tensor], Callable[[int], tuple[Tensor, ...]], str, dict[str, int]]

CASES: dict[str, _Case] = {
    "penalty": (_penalty, lambda n: (torch.randn(n, 8, requires_grad=True),), "n", {"d": 8}),
    "penalty alone": (_penalty_alone, lambda n: (torch.randn(n, 8),), "n", {"d": 8}),
    "WGAN-GP": (_wgan_gp, lambda n: (torch.randn(n, 8), torch.randn(n, 8)), "n", {"d": 8}),
    "double backward": (_double_backward, lambda n: (torch.randn(n, 8),), "n", {"d": 8}),
    "Hessian-vector product": (
        _hvp,
        lambda n: (torch.randn(n, 8), torch.randn(8, 8)),
        "n",
        {"d": 8},
    ),
    "torch.func.grad of grad": (
        _grad_of_grad,
        lambda n: (torch.randn(n, 8), torch.randn(8, 8)),
        "n",
        {"d": 8},
    ),
    "forces and energy": (
        _forces_and_energy,
        lambda n: (torch.randn(n, 3), torch.randn(()), torch.randn(n, 3)),
        "atoms",
        {},
    ),
}


def _ran(case: _Case, n: int) -> tuple[int, int]:
    """Forward and backward FLOPs of a real run (its result's backward too)."""
    function, make, _, _ = case
    with record() as rec:
        out = function(*make(n))
        if out.requires_grad:
            out.backward()
    return rec.total.flops, rec.total.backward_flops


def _estimate(case: _Case, n: int) -> Cost:
    function, _, dim, fixed = case
    grad = ("x",) if function is _penalty else ()
    return function.estimate(**{dim: n}, **fixed, grad=grad)  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize("name", list(CASES))
def test_a_body_taking_a_gradient_with_create_graph_is_estimated_as_it_runs(name: str) -> None:
    case = CASES[name]
    dim = case[2]
    cost = _estimate(case, 5)
    assert (cost.flops, cost.backward_flops) == _ran(case, 5)
    assert cost.forward.exact and cost.backward.exact
    if case[0] is _grad_of_grad:  # (torch.func refuses the hooks that measure activations)
        assert not cost.exact and cost.uncounted[0].startswith("activation memory")
    else:
        assert cost.exact and cost.uncounted == ()
    for n in (2, 9):  # (its formulas, fitted at other sizes, hold where they were not)
        at = {dim: n, **case[3]}
        assert (cost.forward.at(at), cost.backward.at(at)) == _ran(case, n)


def test_the_sum_where_a_penalty_meets_the_forward_is_counted() -> None:
    cost = _estimate(CASES["penalty"], 4)
    assert cost.backward_flops == 536 * 4 + 64 == _ran(CASES["penalty"], 4)[1]


class _Critic(nn.Module):
    """A WGAN-GP critic's training step (its loss's backward run in the body), of width
    ``d``: nobody annotated it."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 2 * d), nn.Tanh(), nn.Linear(2 * d, 1))

    def forward(self, real: Tensor, fake: Tensor) -> Tensor:
        eps = torch.rand(real.shape[0], 1)
        mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
        (g,) = torch.autograd.grad(self.net(mixed).sum(), mixed, create_graph=True)
        loss: Tensor = self.net(fake).mean() - self.net(real).mean() + 10 * g.pow(2).mean()
        loss.backward()
        return loss.detach()


@pytest.mark.parametrize("d", [4, 6])
def test_a_penalty_whose_backward_runs_in_the_body_is_counted_as_it_ran(d: int) -> None:
    model = _Critic(d)
    with record() as rec:
        model(torch.randn(5, d), torch.randn(5, d))
    cost = estimate(model, Float[Tensor, "n d"], Float[Tensor, "n d"], n=5, d=d)
    assert (cost.flops, cost.backward_flops) == (rec.total.flops, rec.total.backward_flops)
    assert cost.exact
