"""``typedflops.estimate`` of a model whose ``forward`` takes values besides its tensors: an
int, a bool and a string are passed as they are, where the parameter takes them; a string
for a tensor parameter is refused as a dim string meant as an annotation
(``tests/cost/test_untyped_models.py``)."""

from __future__ import annotations

from typing import Literal

import pytest
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
