"""Torch functions that read a value only to check it: ``torch.cov``, ``torch.corrcoef``
and ``F.gaussian_nll_loss`` are estimated, their checks answered from shapes, and equal a
record of a real run, forward and backward; cov's weights, whose values torch checks and
sums, are refused in one line."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import estimate, record, typed_flops
from typedflops.errors import DryRunError


def _recorded(function: Callable[..., Tensor], *args: Tensor) -> tuple[int, int]:
    """Forward and backward FLOPs of a real run of ``function(*args)``: the backward from
    ``function(*args).sum()`` (whose own sum and its backward, an expand, are taken off)."""
    with record() as forward:
        out = function(*args)
    with record() as both:
        function(*args).sum().backward()
    assert both.total.flops == forward.total.flops + out.numel()
    return forward.total.flops, both.total.backward_flops


@typed_flops
def covariance(x: Float[Tensor, "v n"]) -> Float[Tensor, "v v"]:
    return torch.cov(x)


@typed_flops
def population_covariance(x: Float[Tensor, "v n"]) -> Float[Tensor, "v v"]:
    return x.cov(correction=0)


@typed_flops
def correlation(x: Float[Tensor, "v n"]) -> Float[Tensor, "v v"]:
    return torch.corrcoef(x)


def _cov_by_hand(v: int, n: int) -> int:
    # the mean: a sum over n (v*n) and a divide per variable (v); cov's check of its
    # degrees of freedom, le and equal on a scalar (0); centring (v*n); the product
    # (2*v*v*n); the divide by n - correction (v*v)
    return v * n + v + v * n + 2 * v * v * n + v * v


@pytest.mark.parametrize("function", [covariance, population_covariance, correlation])
@pytest.mark.parametrize(("v", "n"), [(3, 5), (4, 2), (2, 7)])
def test_covariance_and_correlation_are_estimated_as_a_real_run_counts_them(
    function: Callable[..., Tensor], v: int, n: int
) -> None:
    x = torch.randn(v, n, requires_grad=True)
    cost = estimate(function, grad=("x",), v=v, n=n)
    assert (cost.flops, cost.backward_flops) == _recorded(function, x)
    assert cost.exact
    hand = _cov_by_hand(v, n)
    if function is correlation:
        hand += v + 3 * v * v  # a square root per variable; two divides and a clamp per value
    assert cost.flops == hand
    with FlopCounterMode(display=False) as counter:
        function(x.detach())
    assert cost.matmul_flops == counter.get_total_flops() == 2 * v * v * n
    # the formula holds at other sizes
    other = torch.randn(v + 2, n + 3, requires_grad=True)
    assert cost.forward.at({"v": v + 2, "n": n + 3}) == _recorded(function, other)[0]


def test_a_covariance_of_no_degrees_of_freedom_is_estimated_as_it_runs() -> None:
    # one observation, correction 1: torch warns and divides by zero (a fill, 0 FLOPs)
    x = torch.randn(3, 1, requires_grad=True)
    with pytest.warns(UserWarning, match="degrees of freedom"):
        ran = _recorded(covariance, x)
    cost = estimate(covariance, grad=("x",), v=3, n=1)
    assert (cost.flops, cost.backward_flops) == ran
    assert cost.flops == _cov_by_hand(3, 1)


@typed_flops
def weighted(x: Float[Tensor, "v n"], w: Float[Tensor, " n"]) -> Float[Tensor, "v v"]:
    return torch.cov(x, aweights=w)


def test_weights_whose_values_cov_checks_are_refused_in_one_line() -> None:
    with pytest.raises(DryRunError) as info:
        estimate(weighted, v=3, n=5)
    message = str(info.value)
    assert "\n" not in message
    assert "torch.cov at test_value_checks.py:" in message
    assert "the values of its aweights" in message and "record()" in message
    with record() as rec:  # (a real run is counted)
        weighted(torch.randn(3, 5), torch.rand(5))
    assert rec.total.flops > 2 * 3 * 3 * 5


@typed_flops
def gaussian_nll(
    x: Float[Tensor, "b d"], target: Float[Tensor, "b d"], var: Float[Tensor, "b d"]
) -> Float[Tensor, ""]:
    return F.gaussian_nll_loss(x, target, var)


class Homoscedastic(nn.Module):
    """``nn.GaussianNLLLoss`` with one variance per row, (b, d) inputs, (b,) variances."""

    def __init__(self) -> None:
        super().__init__()
        self.loss = nn.GaussianNLLLoss(full=True, reduction="sum")

    def forward(
        self, x: Float[Tensor, "b d"], target: Float[Tensor, "b d"], var: Float[Tensor, " b"]
    ) -> Tensor:
        return self.loss(x, target, var)  # type: ignore[no-any-return]


def test_the_gaussian_nll_loss_is_estimated_as_a_real_run_counts_it() -> None:
    # its check that no variance is negative (lt and any: 2 a value) is counted as it runs,
    # then per value the clamp, log, subtract, square, divide, add and halve, and the mean
    # (a divide): 9 a value and 1
    x, var = torch.randn(4, 3, requires_grad=True), torch.rand(4, 3, requires_grad=True)
    cost = estimate(gaussian_nll, grad=("x", "var"), b=4, d=3)
    assert (cost.flops, cost.backward_flops) == _recorded(gaussian_nll, x, torch.randn(4, 3), var)
    assert (cost.flops, cost.exact) == (9 * 12 + 1, True)
    model = Homoscedastic()
    shapes = (Float[Tensor, "b d"], Float[Tensor, "b d"], Float[Tensor, " b"])
    module_cost = estimate(model, *shapes, b=4, d=3, grad=("x", "var"))
    ran = _recorded(model, x, torch.randn(4, 3), torch.rand(4, requires_grad=True))
    assert (module_cost.flops, module_cost.backward_flops) == ran
