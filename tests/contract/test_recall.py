"""A call that reads like an earlier one that passed takes its bindings: the verdict and
the message are always the ones a fresh check gives.

The oracle for every case is the same function decorated anew for each call (no earlier
outcome to recall), run on the same arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import typed_flops
from typedflops.contract.recall import LIMIT
from typedflops.errors import ContractError

#: What the return value's shape is, set by the test between calls (the body's own state,
#: which no argument shows).
_RETURN_ROWS: list[int | None] = [None]


def _body(x: Float[Tensor, "b n"], y: Float[Tensor, " n"] | None, k: int) -> Float[Tensor, "b n"]:
    rows = _RETURN_ROWS[0]
    out = x if y is None else x * y
    return out if rows is None else out[:rows]


def _verdict(function: Callable[..., Any], *args: Any) -> str:
    try:
        function(*args)
    except ContractError as error:
        return str(error)
    return "passed"


def _both(recalling: Callable[..., Any], *args: Any) -> tuple[str, str]:
    return _verdict(recalling, *args), _verdict(typed_flops(_body), *args)


_SHAPES = st.sampled_from([(2, 3), (3, 2), (1, 3), (2, 2), (2, 4)])
_DTYPES = st.sampled_from([torch.float32, torch.float64, torch.int64])
_DEVICES = st.sampled_from(["cpu", "meta"])


@st.composite
def _calls(draw: st.DrawFn) -> tuple[tuple[Any, ...], int | None]:
    shape = draw(_SHAPES)
    x = torch.ones(shape, dtype=draw(_DTYPES), device=draw(_DEVICES))
    y_kind = draw(st.sampled_from(["none", "match", "other", "list"]))
    y: Any
    if y_kind == "none":
        y = None
    elif y_kind == "list":
        y = [1.0] * shape[1]
    else:
        width = shape[1] if y_kind == "match" else shape[1] + 1
        y = torch.ones(width, dtype=draw(_DTYPES), device=draw(_DEVICES))
    k: Any = draw(st.sampled_from([1, 2, "two", None]))
    rows = draw(st.sampled_from([None, None, 1, 0]))
    return (x, y, k), rows


@settings(max_examples=60, deadline=None)
@given(st.lists(_calls(), min_size=2, max_size=12))
def test_every_call_gets_the_verdict_of_a_fresh_check(
    calls: list[tuple[tuple[Any, ...], int | None]],
) -> None:
    recalling = typed_flops(_body)
    try:
        for args, rows in calls:
            _RETURN_ROWS[0] = rows
            mine, fresh = _both(recalling, *args)
            assert mine == fresh
    finally:
        _RETURN_ROWS[0] = None


def test_a_return_value_that_changes_is_checked_again() -> None:
    recalling = typed_flops(_body)
    x = torch.ones(4, 3)
    assert _verdict(recalling, x, None, 1) == "passed"
    _RETURN_ROWS[0] = 2
    try:
        mine, fresh = _both(recalling, x, None, 1)
    finally:
        _RETURN_ROWS[0] = None
    assert mine == fresh
    assert "the return value" in mine and "needs b=4" in mine


def test_devices_that_alternate_are_read_each_time() -> None:
    recalling = typed_flops(_body)
    cpu, meta = torch.ones(2, 3), torch.ones(2, 3, device="meta")
    for args in [(cpu, None, 1), (meta, None, 1), (cpu, None, 1), (meta, torch.ones(3), 1)]:
        mine, fresh = _both(recalling, *args)
        assert mine == fresh
    assert "meta" in mine and "cpu" in mine


def test_past_the_limit_outcomes_are_forgotten_not_confused() -> None:
    recalling = typed_flops(_body)
    for rows in range(1, LIMIT + 5):
        assert _verdict(recalling, torch.ones(rows, 3), torch.ones(3), 1) == "passed"
    assert 0 < len(recalling.contract.outcomes) <= LIMIT  # (the calls were recalled)
    assert _verdict(recalling, torch.ones(1, 3), torch.ones(3), 1) == "passed"
    mine, fresh = _both(recalling, torch.ones(1, 3), torch.ones(4), 1)
    assert mine == fresh != "passed"


def test_a_parameter_and_a_tensor_of_one_shape() -> None:
    recalling = typed_flops(_body)
    parameter = nn.Parameter(torch.ones(2, 3))
    for args in [(torch.ones(2, 3), None, 1), (parameter, None, 1), (parameter, torch.ones(2), 1)]:
        mine, fresh = _both(recalling, *args)
        assert mine == fresh


class _Scaled(nn.Module):
    """A module whose own size is a dim of its forward's annotations."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.d = d
        self.weight = nn.Parameter(torch.ones(d))

    def typedflops_dims(self) -> dict[str, int]:
        return {"d": self.d}

    @typed_flops
    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b d"]:
        return x * self.weight


def test_modules_of_other_sizes_are_told_apart() -> None:
    small, large = _Scaled(3), _Scaled(4)
    x = torch.ones(2, 3)
    assert small(x).shape == (2, 3)
    with pytest.raises(ContractError, match="d=4"):
        large(x)
    assert small(x).shape == (2, 3)
    assert large(torch.ones(5, 4)).shape == (5, 4)


def test_a_plain_hint_is_checked_on_every_call() -> None:
    recalling = typed_flops(_body)
    x = torch.ones(2, 3)
    assert _verdict(recalling, x, None, 1) == "passed"
    mine, fresh = _both(recalling, x, None, "two")
    assert mine == fresh
    assert "argument 'k'" in mine
