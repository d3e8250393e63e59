"""A body that runs autograd's engine itself (a training step's ``loss.backward()``, forces
as the gradient of an energy) is estimated as a record of a real run counts it: the backward
it ran is in ``backward_flops``, with a formula that holds at other sizes. The oracle is a
real run under ``record()`` (what ran) and a hand count.

Hand counts, ``n`` rows of width ``d``, a ``d``-by-``d`` weight: a product is 2·n·d·d; the
gradient of ``y.pow(2)`` is three multiplies per element (``2 * y**1 * grad``): 3·n·d.
"""

from __future__ import annotations

import pytest
import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from typedflops import Cost, estimate, record, typed_flops


@typed_flops
def forces(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "n d"]:
    """The gradient of an energy ``sum((x @ w)**2)`` by its positions ``x`` (n, d)."""
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        energy = (x @ w).pow(2).sum()
        (found,) = torch.autograd.grad(energy, x)
    return found


def _ran(n: int, d: int) -> tuple[int, int]:
    with record() as rec:
        forces(torch.randn(n, d), torch.randn(d, d))
    return rec.total.flops, rec.total.backward_flops


def test_a_gradient_taken_in_the_body_is_in_the_estimates_backward() -> None:
    cost = forces.estimate(n=4, d=8)
    # the body's backward: x's gradient through the product (2·n·d·d), the square's 3·n·d
    assert (cost.flops, cost.backward_flops) == _ran(4, 8)
    assert cost.backward_flops == 2 * 4 * 8 * 8 + 3 * 4 * 8
    assert cost.exact
    for n, d in [(5, 3), (1, 6)]:
        assert (cost.forward.at({"n": n, "d": d}), cost.backward.at({"n": n, "d": d})) == _ran(n, d)


class _Energy(nn.Module):
    """Forces on ``atoms`` positions in 3-d from a small network's energy, as force fields
    are written: nobody annotated it."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, positions: Tensor) -> Tensor:
        with torch.enable_grad():
            positions = positions.detach().requires_grad_(True)
            (found,) = torch.autograd.grad(self.net(positions).sum(), positions)
        return -found


def test_an_untyped_model_taking_a_gradient_is_estimated_as_a_real_run_counts_it() -> None:
    model = _Energy()
    cost = estimate(model, Float[Tensor, "atoms 3"], atoms=10)
    for atoms in (10, 17):
        with record() as rec:
            model(torch.randn(atoms, 3))
        at = estimate(model, Float[Tensor, "atoms 3"], atoms=atoms)
        assert (at.flops, at.backward_flops) == (rec.total.flops, rec.total.backward_flops)
        assert cost.backward.at({"atoms": atoms}) == rec.total.backward_flops > 0


def _step_cost(region: str | None) -> tuple[Cost, tuple[int, int, int]]:
    """A training step's estimate, its input needing grad, and what a real run of it ran;
    ``region``: its first layer in a checkpointed region ("reentrant" or not) or not."""
    layer = nn.Linear(8, 8, bias=False)

    @typed_flops
    def step(x: Float[Tensor, "n d"]) -> Float[Tensor, ""]:
        def first(z: Tensor) -> Tensor:
            return torch.tanh(layer(z))

        reentrant = region == "reentrant"
        h = first(x) if region is None else checkpoint(first, x, use_reentrant=reentrant)
        loss: Tensor = layer(h).pow(2).sum()
        loss.backward()
        return loss.detach()

    with record() as rec:
        step(torch.randn(4, 8, requires_grad=True))
    total = rec.total
    ran = (total.flops, total.backward_flops, total.recompute_flops)
    return step.estimate(n=4, d=8, grad=("x",)), ran


def test_a_training_step_is_estimated_with_the_backward_it_runs() -> None:
    cost, ran = _step_cost(None)
    assert (cost.flops, cost.backward_flops, cost.recompute_flops) == ran
    # the weight's two gradients (2·n·d·d each; their sum is the add into ``.grad``, not
    # counted), the input's through both products (2·n·d·d each), the square's 3·n·d,
    # tanh's 3·n·d (``grad * (1 - y**2)``: y², 1 - y², times the gradient)
    assert cost.backward_flops == 4 * 2 * 4 * 8 * 8 + 3 * 4 * 8 + 3 * 4 * 8


@pytest.mark.parametrize("region", ["non-reentrant", "reentrant"])
def test_a_checkpointed_region_in_a_step_is_run_again_once(region: str) -> None:
    cost, ran = _step_cost(region)
    assert (cost.flops, cost.backward_flops, cost.recompute_flops) == ran
    # the region's product and tanh (n·d), run again once for tanh's saved output
    assert cost.recompute_flops == 2 * 4 * 8 * 8 + 4 * 8
    if region == "non-reentrant":  # (the same backward as without the region)
        assert cost.backward_flops == _step_cost(None)[0].backward_flops
