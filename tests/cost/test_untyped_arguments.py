"""``typedflops.estimate`` of a model whose ``forward`` takes values besides its tensors: an
int, a bool and a string are passed as they are, where the parameter takes them; a string
for a tensor parameter is refused as a dim string meant as an annotation
(``tests/cost/test_untyped_models.py``); inputs in dataclasses are built in place."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import pytest
import sympy
import torch
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import estimate, record


class _Modes(nn.Module):
    """A layer run ``k`` times, doubled in ``mode="double"``, a ReLU where ``flag``."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.layer = nn.Linear(d, d)

    def forward(self, x: Tensor, k: int = 1, mode: str = "plain", flag: bool = False) -> Tensor:
        for _ in range(k):
            x = self.layer(x)
        if mode == "double":
            x = x * 2
        return x.relu() if flag else x


class _Reduce(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.layer = nn.Linear(d, d)

    def forward(self, x: Tensor, reduce: Literal["sum", "mean"] | None = None) -> Tensor:
        y: Tensor = self.layer(x)
        return y.mean(0) if reduce == "mean" else y.sum(0)


@pytest.mark.parametrize(
    ("mode", "forward"),
    [
        # three products of 2·4·8·8 = 512, the ReLU's 32 compares (4 by 8), and in "double"
        # mode 32 multiplies
        ("double", 3 * 512 + 32 + 32),
        ("plain", 3 * 512 + 32),
    ],
)
def test_a_string_for_a_parameter_that_takes_one_is_passed_as_it_is(
    mode: str, forward: int
) -> None:
    model = _Modes(8)
    cost = estimate(model, Float[Tensor, "n d"], k=3, mode=mode, flag=True, n=4, d=8)
    with record() as rec:
        model(torch.randn(4, 8), 3, mode, True).sum().backward()
    assert cost.flops == forward == rec.total.flops - 32  # (the loss's sum: 32 adds)
    assert cost.backward_flops == rec.total.backward_flops


@pytest.mark.parametrize(
    # the product's 512, and the reduction over 4 rows: 32 adds, and 8 divides for the mean
    ("reduce", "forward"),
    [("sum", 512 + 32), ("mean", 512 + 32 + 8)],
)
def test_a_literal_of_strings_is_passed_as_it_is(reduce: str, forward: int) -> None:
    assert estimate(_Reduce(8), Float[Tensor, "n d"], reduce=reduce, n=4, d=8).flops == forward


@dataclasses.dataclass(frozen=True)
class _Batch:
    """A batch as training code passes it: tokens' features (b, s, d) and a mask (b, s)."""

    x: Any
    mask: Any
    scale: float = 2.0


class _TakesBatch(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.layer = nn.Linear(d, d, bias=False)

    def forward(self, batch: _Batch, extra: _Batch | None = None) -> Tensor:
        y: Tensor = self.layer(batch.x) * batch.mask[..., None] * batch.scale
        if extra is not None:
            y = y + self.layer(extra.x)
        return y


def test_inputs_in_dataclasses_are_built_from_their_annotations() -> None:
    model = _TakesBatch(8)
    batch = _Batch(Float[Tensor, "b s 8"], Float[Tensor, "b s"])
    cost = estimate(model, batch, b=2, s=3)
    # the product 2·b·s·8·8, the mask's b·s·8 multiplies and the scale's b·s·8
    b, s = sympy.symbols("b s")
    assert cost.formula == (2 * 8 * 8 + 8 + 8) * b * s and cost.exact
    with record() as rec:
        model(_Batch(torch.randn(2, 3, 8), torch.ones(2, 3)))
    assert cost.flops == rec.total.flops == (2 * 8 * 8 + 16) * 6
    # one nested as a keyword, and grad= naming a dataclass input (each tensor in it)
    both = estimate(model, batch, extra=_Batch(Float[Tensor, "b s 8"], None), b=2, s=3)
    with record() as rec:
        model(_Batch(torch.randn(2, 3, 8), torch.ones(2, 3)), _Batch(torch.randn(2, 3, 8), None))
    assert both.flops == rec.total.flops == cost.flops + (2 * 8 * 8 + 8) * 6
    every = estimate(model, batch, b=2, s=3, grad=("batch",))
    assert every.backward_flops - cost.backward_flops == rec_backward_of_inputs(model)


def rec_backward_of_inputs(model: _TakesBatch) -> int:
    """What a real backward ran for the batch's tensors beyond what it ran for the weights."""
    counts = []
    for needs in (False, True):
        x = torch.randn(2, 3, 8, requires_grad=needs)
        mask = torch.ones(2, 3, requires_grad=needs)
        with record() as rec:
            model(_Batch(x, mask)).sum().backward()
        counts.append(rec.total.backward_flops)
    return counts[1] - counts[0]


def test_real_tensors_in_a_dataclass_alone_cost_that_call() -> None:
    model = _TakesBatch(8)
    cost = estimate(model, _Batch(torch.randn(2, 3, 8), torch.ones(2, 3)))
    with record() as rec:
        model(_Batch(torch.randn(2, 3, 8), torch.ones(2, 3)))
    assert cost.flops == rec.total.flops == (2 * 8 * 8 + 16) * 6
    assert cost.formula == cost.flops
