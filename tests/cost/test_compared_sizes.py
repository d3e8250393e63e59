"""A branch on how two sizes compare past a factor (``if n > 8 * d``, a sequence longer
than a multiple of a module's width) keeps its side when every dim is taken far at once:
each dim is taken far alone too, so a formula fitted on one side is never marked exact.
Checked against ``record()`` of real runs on the other side."""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import Cost, record, typed_flops

SLOW = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _ran(function: object, *args: object) -> tuple[int, int]:
    """Forward and backward FLOPs of a real call, as ``record()`` counts them."""
    with record() as rec:
        out = function(*args)  # type: ignore[operator]
        out.sum().backward()
    cost = rec.calls[0].cost()
    return cost.flops, cost.backward_flops


def _exact_where_marked(cost: Cost, dims: dict[str, int], ran: tuple[int, int]) -> None:
    values = {**cost.dims, **dims}
    for term, count in ((cost.forward, ran[0]), (cost.backward, ran[1])):
        assert term.holds_at(cost.dims)
        if term.exact:
            assert term.at(values) == count, (term, dims, count)


def _tall(factor: int) -> object:
    @typed_flops
    def tall(x: Float[Tensor, "n d"]) -> Tensor:
        y = x * 2
        if x.shape[0] > factor * x.shape[1]:
            y = y * 3
        return y

    return tall


def test_a_branch_on_a_dim_past_a_multiple_of_another_is_not_exact() -> None:
    tall = _tall(8)
    cost = tall.estimate(n=4, d=3, grad=("x",))  # type: ignore[attr-defined]
    # at n=4, d=3: one multiply per element forward (12) and its gradient (12); past
    # n = 8*d a second multiply runs: at n=25, d=3 twice 75 each way
    assert (cost.flops, cost.backward_flops) == (12, 12)
    ran = _ran(tall, torch.randn(25, 3, requires_grad=True))
    assert ran == (150, 150)
    # was d*n, exact: 75 at n=25, d=3 where 150 ran
    assert not cost.exact
    _exact_where_marked(cost, {"n": 25, "d": 3}, ran)


class Windowed(nn.Module):
    """A layer whose input is mixed with itself shifted where it is longer than four
    times the layer's width (the width the input's ``d`` is built at)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.d = d
        self.lin = nn.Linear(d, d)

    @typed_flops
    def forward(self, x: Float[Tensor, "b n d"]) -> Tensor:
        y: Tensor = self.lin(x)
        if x.shape[1] > 4 * self.d:
            y = y * 2
        return y


def test_a_branch_on_a_dim_past_a_multiple_of_a_module_width_is_not_exact() -> None:
    cost = Windowed.forward.estimate(Windowed(3), b=2, n=4, d=3, grad=("x",))
    # hand count at b=2, n=13, d=3, past n = 4*d: the product 2*3*3 per row (26 rows: 468)
    # and the doubling of 78 values: 546 forward
    ran = _ran(Windowed(3), torch.randn(2, 13, 3, requires_grad=True))
    assert ran[0] == 546
    # was 2*b*d**2*n, exact: 468 at n=13 where 546 ran
    assert not cost.exact
    _exact_where_marked(cost, {"b": 2, "n": 13, "d": 3}, ran)


@SLOW
@given(
    factor=st.integers(2, 40),
    n=st.integers(2, 6),
    d=st.integers(2, 6),
    other=st.integers(1, 300),
)
def test_a_compared_branch_is_never_exact_and_wrong(
    factor: int, n: int, d: int, other: int
) -> None:
    tall = _tall(factor)
    cost = tall.estimate(n=n, d=d, grad=("x",))  # type: ignore[attr-defined]
    for at in ({"n": other, "d": d}, {"n": n, "d": other}, {"n": other, "d": 2}):
        ran = _ran(tall, torch.randn(at["n"], at["d"], requires_grad=True))
        _exact_where_marked(cost, at, ran)
