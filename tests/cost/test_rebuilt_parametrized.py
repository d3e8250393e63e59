"""Modules with parametrized weights (``parametrizations.weight_norm``, ``spectral_norm``,
``parametrize.register_parametrization``) are rebuilt at other sizes like any other: each
registration makes a class of its own for the module it parametrizes, and a rebuilt twin's
class is made from the same one. Their formulas are checked against records of real runs,
forward and backward, at sizes other than the estimate's."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

from typedflops import estimate, record


class Symmetric(nn.Module):
    """(n, n) -> (n, n): the upper triangle mirrored below the diagonal."""

    def forward(self, weight: Tensor) -> Tensor:
        return weight.triu() + weight.triu(1).transpose(-1, -2)


def symmetric(layer: nn.Linear) -> nn.Linear:
    parametrize.register_parametrization(layer, "weight", Symmetric())
    return layer


class Projection(nn.Module):
    """(b, d_in) -> (b, d_out): a linear layer with a parametrized weight, then a relu."""

    def __init__(self, d_in: int, d_out: int, kind: str) -> None:
        super().__init__()
        self.d_in = d_in
        self.d_out = d_out
        self.kind = kind
        wrap: dict[str, Callable[[nn.Linear], nn.Module]] = {
            "weight_norm": weight_norm,
            "spectral_norm": spectral_norm,
        }
        self.proj = wrap[kind](nn.Linear(d_in, d_out))

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.proj(x))


class Square(nn.Module):
    """(b, d) -> (b, d): a linear layer whose (d, d) weight is kept symmetric."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.d = d
        self.proj = symmetric(nn.Linear(d, d))

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.proj(x)
        return y


def recorded(model: nn.Module, x: Tensor) -> tuple[int, int]:
    """Forward and backward FLOPs of a real run of ``model`` on ``x``."""
    with record() as rec:
        y = model(x)
        y.backward(torch.ones_like(y))
    return rec.total.flops, rec.total.backward_flops


@pytest.mark.parametrize("kind", ["weight_norm", "spectral_norm"])
def test_a_parametrized_linear_is_rebuilt_at_other_widths(kind: str) -> None:
    torch.manual_seed(0)
    cost = estimate(Projection(16, 12, kind), Float[Tensor, "b d_in"], b=4, d_in=16)
    assert dict(cost.fixed) == {}
    assert cost.exact
    names = {str(s) for s in cost.formula.free_symbols}
    assert names == {"b", "d_in", "d_out"}
    for b, d_in, d_out in [(4, 16, 12), (3, 20, 12), (5, 16, 7), (2, 9, 13), (6, 11, 11)]:
        at = {"b": b, "d_in": d_in, "d_out": d_out}
        forward, backward = recorded(Projection(d_in, d_out, kind), torch.randn(b, d_in))
        assert int(cost.formula.subs(at)) == forward, at
        assert int(cost.backward.formula.subs(at)) == backward, at


def test_a_weight_of_its_own_parametrization_is_rebuilt_at_other_sizes() -> None:
    torch.manual_seed(0)
    cost = estimate(Square(6), Float[Tensor, "b d"], b=4, d=6)
    assert dict(cost.fixed) == {}
    assert cost.exact
    for b, d in [(4, 6), (3, 6), (4, 9), (2, 4), (5, 11)]:
        at = {"b": b, "d": d}
        forward, backward = recorded(Square(d), torch.randn(b, d))
        # by hand: the product 2*b*d*d, its bias folded in; the weight's mirror adds d*d
        # (triu and transpose move values; the add sums the two triangles)
        assert forward == 2 * b * d * d + d * d
        assert int(cost.formula.subs(at)) == forward, at
        assert int(cost.backward.formula.subs(at)) == backward, at
