"""A record finds the usual op's event again by its tensors' guard (one C++ check of type,
dispatch keys, dtype, device, ``requires_grad``, sizes and strides) instead of building its
key: what it counts must be what keying every op counts, for calls that differ in every part
of the key (shape, dtype, ``requires_grad``, strides, one tensor given twice, grad mode,
inference mode, a Parameter).

The body below, at batch ``b`` and width 4 with ``w`` 4-by-4: ``x @ w`` is ``2·b·4·4 =
32·b`` FLOPs, ``relu`` and ``+`` none (FlopCounterMode's convention: only the
matmul family counts), ``y @ w.T`` another ``32·b``: ``64·b`` forward FLOPs a call.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record, typed_flops
from typedflops.cost.engine import key_guards
from typedflops.cost.engine.opkeys import EVENTS, PLANS

WIDTH = 4


@typed_flops
def block(x: Float[Tensor, "b d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "b d"]:
    y = x @ w
    return torch.relu(y) + y @ w.T


def _forget_guards() -> None:
    for plan in PLANS.values():
        plan.guarded = ()
        plan.built = 0


# (batch, dtype, requires grad, transposed input, x given as w, grad mode)
Variant = tuple[int, torch.dtype, bool, bool, bool, str]

variants = st.tuples(
    st.integers(1, 4),
    st.sampled_from([torch.float32, torch.float64]),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["grad", "no_grad", "inference"]),
)


def _run(variants: list[Variant], weights: dict[torch.dtype, Tensor]) -> None:
    for batch, dtype, needs_grad, transposed, alias, mode in variants:
        w = weights[dtype]
        if alias:
            x = w
        elif transposed:
            x = torch.randn(WIDTH, batch, dtype=dtype).T
        else:
            x = torch.randn(batch, WIDTH, dtype=dtype)
        x = x.detach().requires_grad_(needs_grad) if not alias else x
        if mode == "grad":
            block(x, w)
        elif mode == "no_grad":
            with torch.no_grad():
                block(x, w)
        else:
            with torch.inference_mode():
                block(x.detach(), w.detach())


def _recorded(variants: list[Variant]) -> tuple[dict[str, Any], list[Any], int]:
    torch.manual_seed(0)
    weights = {
        torch.float32: torch.nn.Parameter(torch.randn(WIDTH, WIDTH)),
        torch.float64: torch.randn(WIDTH, WIDTH, dtype=torch.float64),
    }
    with FlopCounterMode(display=False) as counter, record() as rec:
        _run(variants, weights)
    return (
        rec.total.to_dict(),
        [(row.calls, row.dims, row.cost().to_dict()) for row in rec.calls],
        counter.get_total_flops(),
    )


def _batches(variants: list[Variant]) -> int:
    return sum(WIDTH if alias else batch for batch, _, _, _, alias, _ in variants)


@settings(max_examples=25, deadline=None)
@given(st.lists(variants, min_size=1, max_size=8))
def test_guarded_records_count_as_keyed_ones(variants: list[Variant]) -> None:
    guarded = _recorded(variants)
    _forget_guards()
    key_guards_limit = key_guards.BUILD_LIMIT
    key_guards.BUILD_LIMIT = 0
    try:
        keyed = _recorded(variants)
    finally:
        key_guards.BUILD_LIMIT = key_guards_limit
        _forget_guards()
    assert guarded == keyed
    total, _, counted = guarded
    assert total["matmul_flops"] == counted == 64 * _batches(variants)
    assert total["flops"] == 72 * _batches(variants)


def test_a_guard_passes_only_what_its_key_would_find() -> None:
    """Each guard kept stands for the event its tensors' key finds, after calls of every
    variant (the same op at two shapes, transposed, one tensor twice, with and without
    grad)."""
    _forget_guards()
    torch.manual_seed(0)
    weights = {
        torch.float32: torch.randn(WIDTH, WIDTH, requires_grad=True),
        torch.float64: torch.randn(WIDTH, WIDTH, dtype=torch.float64),
    }
    every: list[Variant] = [
        (batch, dtype, needs_grad, transposed, alias, "grad")
        for batch in (1, 3)
        for dtype in (torch.float32, torch.float64)
        for needs_grad in (False, True)
        for transposed in (False, True)
        for alias in (False, True)
    ]
    with record() as rec:
        _run(every * 2, weights)
    assert rec.total.flops == 2 * 72 * _batches(every)
    guarded = [(plan, entry) for plan in PLANS.values() for entry in plan.guarded]
    assert {type(plan.fast).__name__ for plan, _ in guarded} == {"builtin_function_or_method"}
    assert len(guarded) >= 3  # (mm and relu at least, each with its last two tensor sets)
    for _, (_, _, _, event) in guarded:
        assert any(kept is event for kept in EVENTS.values())


def test_an_op_seen_at_ever_new_shapes_stops_making_guards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _forget_guards()
    monkeypatch.setattr(key_guards, "BUILD_LIMIT", 5)
    w = torch.randn(WIDTH, WIDTH)
    with record() as rec:
        for batch in range(1, 21):
            block(torch.randn(batch, WIDTH), w)
    assert rec.total.flops == 72 * sum(range(1, 21))
    assert max(plan.built for plan in PLANS.values()) == 5
    _forget_guards()


def test_a_guard_torch_cannot_build_leaves_the_op_keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's tensor guard is internal to dynamo: where it takes other arguments, the op is
    keyed as before and counted alike."""

    def refused(*args: object, **kwargs: object) -> None:
        raise TypeError("missing dynamic_dims_sizes=...")

    _forget_guards()
    monkeypatch.setattr(key_guards, "_TensorGuards", refused)
    w = torch.randn(WIDTH, WIDTH)
    with record() as rec:
        for batch in (1, 2, 1):
            block(torch.randn(batch, WIDTH), w)
    assert rec.total.flops == 72 * 4
    assert all(plan.guarded == () for plan in PLANS.values())
    _forget_guards()
