"""A ``flops=`` formula that gives no count at a recorded call's argument sizes (negative,
or not a whole number) is a SpecError raised before the body runs: none of its work is
done, and the record keeps what ran before it. A formula naming a dim only the return
value binds is checked once the body returned.

Hand counts: ``x * 2`` on a 4x3 ``x`` is 12 FLOPs; ``x @ x.T`` on a 4x3 ``x`` is
2·4·4·3 = 96.
"""

from __future__ import annotations

import pytest
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import SpecError, TypedFunction, record, typed_flops

RAN: list[str] = []


@typed_flops(flops="n - d")
def difference(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    """A body that notes it ran, then doubles ``x`` (n·d FLOPs, declared as n - d)."""
    RAN.append("difference")
    return x * 2


@typed_flops(flops="n*d/2")
def halved(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    """As above, declared as n·d/2."""
    RAN.append("halved")
    return x * 2


@typed_flops
def caller(x: Float[Tensor, "n d"]) -> Float[Tensor, "n n"]:
    """A product (2·n·n·d FLOPs), then a call of ``difference``."""
    y = x @ x.T
    difference(x)
    return y


@typed_flops(flops="m - n")
def grown(x: Float[Tensor, "n d"]) -> Float[Tensor, "m d"]:
    """Its formula names ``m``, which only the return value (3·n rows) binds."""
    RAN.append("grown")
    return torch.cat([x, x, x]) * 2


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (difference, "difference(): flops=-d + n gives -1 FLOPs at n=3, d=4; a count is never"),
        (halved, "halved(): flops=d*n/2 gives 3/2 FLOPs at n=1, d=3; a count is a whole"),
    ],
)
def test_a_formula_refused_at_the_arguments_sizes_runs_no_body(
    function: TypedFunction[..., Tensor], message: str
) -> None:
    shape = (3, 4) if function is difference else (1, 3)
    RAN.clear()
    with pytest.raises(SpecError) as caught, record() as rec:
        torch.ones(4, 3) * 2
        function(torch.ones(*shape))
    assert str(caught.value).startswith(message)
    assert RAN == []
    assert rec.total.flops == 12  # what ran before the call


def test_a_call_refused_inside_another_gives_its_caller_the_ops_run_before() -> None:
    RAN.clear()
    with pytest.raises(SpecError, match=r"flops=-d \+ n gives -1 FLOPs"), record() as rec:
        caller(torch.ones(3, 4))
    assert RAN == []
    assert rec.total.flops == 2 * 3 * 3 * 4
    with record() as again:  # the next record counts as usual
        difference(torch.ones(4, 3))
    assert again.total.flops == 4 - 3


def test_a_formula_in_a_dim_the_return_binds_is_evaluated_after_the_body() -> None:
    RAN.clear()
    with record() as rec:
        grown(torch.ones(2, 5))
    assert RAN == ["grown"]
    assert rec.total.flops == 3 * 2 - 2


@typed_flops(flops="n*d")
def declared_around(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    """A ``flops=`` call whose count stands for its body's, ``difference`` included."""
    return difference(x) + 1


def test_a_call_inside_a_flops_call_is_counted_by_that_call_alone() -> None:
    with record() as rec:
        declared_around(torch.ones(2, 3))
    assert rec.total.flops == declared_around.estimate(n=2, d=3).flops == 2 * 3
