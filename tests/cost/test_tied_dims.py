"""Dims the body accepts only when equal (``x @ x`` on ``"b h w"``, an ``assert n == m``):
no value runs for one alone, so the dry runs change them together, as one symbol named after
the first, and the formula is a formula in it that a real run at other equal sizes gives.
Before, each stayed a number in the formula while a part at 1 named it, and the whole was
marked exact: ``250*b - 248*b*KroneckerDelta(1, h)*KroneckerDelta(1, w)`` for ``x @ x`` at
5x5, 250 per row at 7x7 too, where 686 ran.

Hand counts: a square product of ``h x h`` matrices is ``2*h**3`` per matrix; an
elementwise product of two rows of ``n`` is ``n``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sympy
import torch
from jaxtyping import Float
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record, typed_flops

b, c, h, n = sympy.symbols("b c h n")


@typed_flops
def squared(x: Float[Tensor, "b h w"]) -> Float[Tensor, "b h w"]:
    # (the mypy plugin says h and w must be one dim here: the runtime finds it too)
    return x @ x  # type: ignore[dim-alias]


@typed_flops
def squared_by_einsum(x: Float[Tensor, "b c h w"]) -> Float[Tensor, "b c h w"]:
    return torch.einsum("...ij,...jk->...ik", x, x)  # type: ignore[dim-alias]


@typed_flops
def matched(x: Float[Tensor, "b n"], y: Float[Tensor, "b m"]) -> Float[Tensor, "b n"]:
    assert x.shape[1] == y.shape[1], "the rows must be as long"
    return x * y  # type: ignore[dim-alias]


CASES: list[tuple[Callable[..., Tensor], Callable[[int], tuple[Tensor, ...]], sympy.Expr]] = [
    (squared, lambda s: (torch.randn(2, s, s),), 2 * b * h**3),
    (squared_by_einsum, lambda s: (torch.randn(2, 3, s, s),), 2 * b * c * h**3),
    (matched, lambda s: (torch.randn(3, s), torch.randn(3, s)), b * n),
]


@pytest.mark.parametrize(("function", "inputs", "formula"), CASES)
def test_dims_that_run_only_equal_are_one_symbol_true_at_other_sizes(
    function: Callable[..., Tensor],
    inputs: Callable[[int], tuple[Tensor, ...]],
    formula: sympy.Expr,
) -> None:
    with record() as rec:
        function(*inputs(5))
    cost = rec.calls[0].cost()
    assert (cost.formula, cost.exact, cost.fixed) == (formula, True, {})
    for size in (2, 7, 12):
        with record() as again, FlopCounterMode(display=False) as counter:
            function(*inputs(size))
        ran = again.total.flops
        assert cost.formula.subs({**cost.dims, "h": size, "n": size}) == ran
        if function is not matched:  # (a product: FlopCounterMode counts it)
            assert counter.get_total_flops() == ran
