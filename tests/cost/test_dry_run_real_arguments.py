"""A decorated function called in a dry run with real tensors (a global weight, a tensor
given to ``estimate()``) is checked and counted on the meta copies its ops take: one device,
the count of a real run, nothing real written."""

from __future__ import annotations

from typing import NamedTuple

import sympy
import torch
from jaxtyping import Float
from torch import Tensor, nn

import typedflops.nn as tnn
from typedflops import estimate, record, typed_flops

B, D, K = 4, 8, 3
_W = torch.randn(D, K)
_SCALE = torch.tensor(0.5)


@typed_flops
def _proj(x: Float[Tensor, "b d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "b k"]:
    return x @ w


@typed_flops
def _through_global(x: Float[Tensor, "b d"]) -> Float[Tensor, "b k"]:
    return _proj(x, _W)


@typed_flops
def _back_through_global(x: Float[Tensor, "b d"]) -> Float[Tensor, "b d"]:
    return _proj(x, _W) @ _W.T


@typed_flops
def _weight() -> Float[Tensor, "d k"]:
    return _W


@typed_flops
def _with_fetched(x: Float[Tensor, "b d"]) -> Float[Tensor, "b k"]:
    return x @ _weight()


@typed_flops
def _scaled(x: Float[Tensor, "b d"], s: Float[Tensor, ""]) -> Float[Tensor, "b d"]:
    return x * s


@typed_flops
def _scaled_global(x: Float[Tensor, "b d"]) -> Float[Tensor, "b d"]:
    return _scaled(x, _SCALE)


class _Pair(NamedTuple):
    x: Tensor
    w: Tensor


@typed_flops
def _in_containers(
    pair: tuple[Float[Tensor, "b d"], Float[Tensor, "d k"]],
    named: dict[str, Float[Tensor, "b d"]],
) -> Float[Tensor, "b k"]:
    return pair[0] @ pair[1] + named["x"] @ pair[1]


@typed_flops
def _writes(x: Float[Tensor, "b d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "b k"]:
    w.add_(1.0)
    return x @ w


def test_a_decorated_call_given_a_global_weight_in_a_dry_run_counts_as_a_real_run() -> None:
    # before: DeviceError "argument 'w' is on cpu but argument 'x' is on meta"
    x = torch.randn(B, D)
    with record() as rec:
        _through_global(x)
    cost = _through_global.estimate(b=B, d=D)
    assert cost.flops == rec.total.flops == 2 * B * D * K
    assert cost.formula.subs(cost.dims) == cost.flops
    both = _back_through_global.estimate(b=B, d=D)
    assert both.flops == 2 * B * D * K + 2 * B * K * D
    assert estimate(lambda x: _proj(x, _W), Float[Tensor, "b d"], b=B, d=D).flops == 2 * B * D * K


def test_estimate_of_a_decorated_function_given_real_tensors_counts_them() -> None:
    x, w = torch.randn(B, D), torch.randn(D, K)
    with record() as rec:
        _proj(x, w)
    assert estimate(_proj, x, w).flops == rec.total.flops == 2 * B * D * K
    assert estimate(_proj, Float[Tensor, "b d"], w, b=B, d=D).flops == 2 * B * D * K


def test_a_real_tensor_a_decorated_call_returns_in_a_dry_run_is_checked_on_meta() -> None:
    # before: DeviceError "the return value is on cpu ..." where the caller's x is on meta
    assert _with_fetched.estimate(b=B, d=D).flops == 2 * B * D * K


def test_a_cpu_scalar_argument_stays_a_scalar_and_counts() -> None:
    assert _scaled_global.estimate(b=B, d=D).flops == B * D
    assert estimate(_scaled, Float[Tensor, "b d"], _SCALE, b=B, d=D).flops == B * D


def test_real_tensors_in_containers_are_taken_as_meta_copies() -> None:
    x, w = torch.randn(B, D), torch.randn(D, K)
    with record() as rec:
        _in_containers((x, w), {"x": x})
    cost = estimate(_in_containers, (x, w), {"x": x})
    assert cost.flops == rec.total.flops == 2 * (2 * B * D * K) + B * K


def test_a_named_tuple_of_real_tensors_keeps_its_type() -> None:
    from typedflops.cost.engine.function_backward import map_tensors

    pair = _Pair(torch.ones(2), torch.zeros(3))
    mapped = map_tensors(pair, lambda t: t.to("meta"))
    assert type(mapped) is _Pair and mapped.x.is_meta and mapped.w.shape == (3,)
    mapped_dict = map_tensors({"a": [torch.ones(1)]}, lambda t: t * 2)
    assert mapped_dict["a"][0].item() == 2.0


def test_a_dry_run_writes_nothing_into_a_real_argument() -> None:
    x, w = torch.randn(B, D), torch.randn(D, K)
    before = w.clone()
    cost = estimate(_writes, x, w)
    assert torch.equal(w, before)
    assert cost.flops == 2 * B * D * K + D * K  # the product and the add_


class _Projected(nn.Module):
    """A plain module over a typed one, its buffer passed to a decorated function."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = tnn.Linear(D, 5)
        self.register_buffer("table", torch.randn(5, K))

    def forward(self, x: Tensor) -> Tensor:
        table = self.get_buffer("table")
        return _proj(self.lin(x), table)


def _projected_at(d_in: int) -> nn.Module:
    module = _Projected()
    module.lin = tnn.Linear(d_in, 5)
    return module


def test_a_module_rebuilt_with_a_buffer_for_a_decorated_call_is_fitted_in_its_size() -> None:
    # before: its rebuilt runs stopped at the decorated call (a real buffer beside meta
    # inputs), so `d` was held: 110*b; its ops now name `d`, and hold at other sizes
    cost = estimate(_Projected(), Float[Tensor, "b d"], b=B, d=D)
    b, d = sympy.symbols("b d")
    assert sympy.expand(cost.formula - 10 * b * (d + K)) == 0 and cost.exact
    for d_in in (2, 3, 16):
        with record() as rec:
            _projected_at(d_in)(torch.randn(B, d_in))
        assert cost.formula.subs({b: B, d: d_in}) == rec.total.flops
        ops = {op.op: op.forward.formula.subs({b: B, d: d_in}) for op in cost.ops}
        assert ops == {op.op: op.flops for op in rec.total.ops if op.flops}
