"""``estimate()`` of a model with lazy layers not initialized yet (``nn.LazyLinear``,
``nn.LazyConv2d``, ``nn.LazyBatchNorm1d``): their sizes come from the first call's inputs,
so the estimate initializes them on a copy of the model on ``meta`` by one call at the sizes
given, as a first real call would, and costs the copy. The caller's model stays lazy."""

from __future__ import annotations

import pytest
import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.nn.parameter import UninitializedParameter

from typedflops import SpecError, estimate, record


def _lazy_mlp() -> nn.Sequential:
    return nn.Sequential(nn.LazyLinear(8), nn.LazyBatchNorm1d(), nn.ReLU(), nn.Linear(8, 4))


def _plain_mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))


def test_a_lazy_model_costs_as_the_model_its_first_call_makes() -> None:
    lazy, plain = _lazy_mlp(), _plain_mlp()
    spec = Float[Tensor, "b 16"]
    cost = estimate(lazy, spec, b=6)
    expected = estimate(plain, spec, b=6)
    assert (cost.flops, cost.backward_flops, cost.formula) == (
        expected.flops,
        expected.backward_flops,
        expected.formula,
    )
    assert cost.exact
    # the caller's model is as it was: its lazy layers wait for its first real call
    assert type(lazy[0]) is nn.LazyLinear
    assert isinstance(lazy[0].weight, UninitializedParameter)
    x = torch.randn(6, 16)
    with record() as ran:
        lazy(x)
    assert type(lazy[0]) is nn.Linear and lazy[0].weight.shape == (8, 16)
    assert ran.total.flops == cost.flops


def test_a_record_of_a_lazy_models_first_call_counts_it() -> None:
    # (its batch norm's buffers, made when it is first called, were read for their shape)
    lazy = _lazy_mlp()
    x = torch.randn(6, 16)
    with record() as ran:
        lazy(x).sum().backward()
    plain = _plain_mlp()
    with record() as expected:
        plain(x).sum().backward()
    assert (ran.total.flops, ran.total.backward_flops) == (
        expected.total.flops,
        expected.total.backward_flops,
    )


def test_a_lazy_convolution_keeps_its_formula_in_the_image_sizes() -> None:
    lazy = nn.Sequential(nn.LazyConv2d(4, 3, padding=1), nn.ReLU())
    plain = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
    spec = Float[Tensor, "b 3 h w"]
    cost = estimate(lazy, spec, b=2, h=8, w=10)
    assert cost.formula == estimate(plain, spec, b=2, h=8, w=10).formula
    assert cost.exact and {str(s) for s in cost.formula.free_symbols} == {"b", "h", "w"}


class _Unused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(16, 4)
        self.spare = nn.LazyLinear(4)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.used(x)
        return out


def test_a_lazy_layer_the_call_never_reaches_is_named() -> None:
    with pytest.raises(SpecError) as caught:
        estimate(_Unused(), Float[Tensor, "b 16"], b=2)
    assert str(caught.value).splitlines()[0] == (
        "estimate(_Unused): a lazy layer is not initialized by a call at these sizes "
        "(the call never reached it); call the model once on a real input first"
    )


def test_a_lazy_layer_a_call_cannot_initialize_is_named() -> None:
    model = nn.Sequential(nn.LazyLinear(8), nn.Linear(7, 2))  # (8 features into 7)
    with pytest.raises(SpecError) as caught:
        estimate(model, Float[Tensor, "b 16"], b=2)
    first = str(caught.value).splitlines()[0]
    assert first.startswith(
        "estimate(Sequential): its lazy layers cannot be initialized by a call at these "
        "sizes (RuntimeError: "
    )


def test_a_lazy_model_without_its_sizes_says_which_are_missing() -> None:
    with pytest.raises(SpecError) as caught:
        estimate(_lazy_mlp(), Float[Tensor, "b 16"])
    assert str(caught.value).splitlines()[0] == (
        "estimate(Sequential): its lazy layers are initialized by a call at the sizes "
        "given, and b is not given; pass b=..."
    )


class _Usual(nn.Module):
    """Written as people write it: a lazy head over any leading dims, a tensor made inside
    ``forward``, batch 1."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.LazyLinear(12)
        self.out = nn.Linear(12, 3)

    def forward(self, x: Tensor) -> Tensor:
        scale = torch.ones(x.shape[-1])  # (on the default device)
        out: Tensor = self.out(torch.relu(self.proj(x * scale)))
        return out


def test_a_lazy_module_written_the_usual_way_over_any_leading_dims() -> None:
    lazy = _Usual()
    cost = estimate(lazy, Float[Tensor, "... 7"], ellipsis=(1, 5))
    x = torch.randn(1, 5, 7)
    with record() as ran:
        lazy(x)
    assert (cost.flops, cost.exact) == (ran.total.flops, True)
