"""A jagged batch given to a decorated call inside ``record()``: its ragged dim (torch's
nested int ``j1``, rows of other lengths) is no size a row can name, so the row names the
call's other dims and its count stays a number; every call is counted as it ran, and the
record's total, table and JSON are read without error.

Hand counts: a jagged batch of rows of 8 features times an 8 x 8 weight is one product per
row, 2·8·8 = 128 FLOPs a row: lengths 3 and 5 (8 rows) 1,024, lengths 1 and 3 (4 rows) 512.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from filled import ones
from jaxtyping import Float, Shaped
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record, typed_flops

W = ones(8, 8)
ROW = 2 * 8 * 8


@typed_flops
def named(x: Float[Tensor, "b s d"], w: Float[Tensor, "d e"]) -> Float[Tensor, "b s e"]:
    return x @ w


@typed_flops
def variadic(x: Float[Tensor, "*batch d"], w: Float[Tensor, "d e"]) -> Float[Tensor, "*batch e"]:
    return x @ w


@typed_flops
def anonymous(x: Shaped[Tensor, "..."], w: Float[Tensor, "d e"]) -> Shaped[Tensor, "..."]:
    return x @ w


def _jagged(*lengths: int) -> Tensor:
    return torch.nested.nested_tensor([ones(n, 8) for n in lengths], layout=torch.jagged)


@pytest.mark.parametrize("function", [named, variadic, anonymous])
def test_a_jagged_batch_is_counted_as_it_ran_in_each_call(function: Any) -> None:
    first, second = _jagged(3, 5), _jagged(1, 3)
    with FlopCounterMode(display=False) as counter, record() as rec:
        function(first, W)
        function(second, W)
    assert rec.total.flops == counter.get_total_flops() == 8 * ROW + 4 * ROW
    assert [row.calls for row in rec.calls] == [1, 1]
    for row in rec.calls:
        cost = row.cost()
        assert cost.dims == {"d": 8, "e": 8} | ({"b": 2} if function is named else {})
        assert not cost.exact
    assert "d=8" in rec.table()
    assert json.loads(rec.to_json())
