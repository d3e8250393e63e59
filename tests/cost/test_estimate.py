"""Dry runs and formulas: estimate(), formula, record() tables, and their errors."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import sympy
import torch
from jaxtyping import Float, Int
from torch import Tensor

import typedflops
from typedflops import SpecError, einsum, rearrange, record, typed_flops


@typed_flops
def linear(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    return einsum(x, w, "batch d_in, d_in d_out -> batch d_out")


@typed_flops(flops="2*batch*d_in*d_out")
def linear_explicit(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    return x @ w


@typed_flops
def split(x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch 4 d_head"]:
    return rearrange(x, "batch (heads d_head) -> batch heads d_head", heads=4)


@typed_flops
def scaled(x: Float[Tensor, "n d"], factor: int) -> Float[Tensor, "n d"]:
    return x * factor


@typed_flops
def embed(
    ids: Int[Tensor, "batch seq"], table: Float[Tensor, "vocab d"]
) -> Float[Tensor, "batch seq d"]:
    return table[ids]


def test_explicit_formula_is_used_as_given_and_agrees_with_the_count() -> None:
    batch, d_in, d_out = sympy.symbols("batch d_in d_out")
    assert linear_explicit.formula == 2 * batch * d_in * d_out
    assert linear_explicit.formula == linear.formula
    cost = linear_explicit.estimate(batch=3, d_in=5, d_out=7)
    assert cost.flops == 2 * 3 * 5 * 7


def test_formula_uses_the_sizes_of_the_last_call() -> None:
    split(torch.ones(2, 8))  # the probe sizes are primes: not divisible by 4 heads
    assert split.formula == 0  # a rearrange costs nothing, at the last call's sizes


def test_formula_at_probe_sizes_that_the_body_cannot_take_asks_for_estimate() -> None:
    @typed_flops
    def heads(x: Float[Tensor, "batch d"]) -> Float[Tensor, "batch 7 d_head"]:
        return rearrange(x, "batch (heads d_head) -> batch heads d_head", heads=7)

    # The probe sizes are multiples of 24: a split into 7 heads does not divide them.
    with pytest.raises(SpecError, match=r"call heads.estimate\(\.\.\.\) with sizes"):
        heads.formula  # noqa: B018
    heads.estimate(batch=2, d=14)
    assert heads.formula == 0


def test_missing_and_unknown_dims_are_named() -> None:
    with pytest.raises(SpecError, match=r"missing size for d_out; pass d_out=\.\.\."):
        linear.estimate(batch=2, d_in=3)
    with pytest.raises(SpecError, match="unknown dim batchh; its dims are batch, d_in, d_out"):
        linear.estimate(batchh=2, batch=2, d_in=3, d_out=4)
    with pytest.raises(SpecError, match="grad names v, which is not a tensor parameter"):
        linear.estimate(batch=2, d_in=3, d_out=4, grad=("v",))


def test_non_tensor_arguments_are_passed_through_or_required() -> None:
    cost = scaled.estimate(n=3, d=4, factor=2)
    assert cost.flops == 12
    with pytest.raises(SpecError, match="cannot build argument 'factor'"):
        scaled.estimate(n=3, d=4)


def test_integer_inputs_get_an_integer_dtype() -> None:
    cost = embed.estimate(batch=2, seq=3, vocab=11, d=4)
    assert cost.flops == 0


def test_estimate_at_gpu_sizes_runs_on_meta() -> None:
    # 16384 x 32768 bfloat16 is 1 GiB: only meta tensors make this a dry run.
    # (benchmarks/estimate.py measures how long it takes.)
    cost = linear.estimate(batch=16384, d_in=32768, d_out=8192, dtype=torch.bfloat16)
    assert cost.flops == 2 * 16384 * 32768 * 8192
    assert cost.bytes_read == 2 * (16384 * 32768 + 32768 * 8192)
    assert cost.bytes_written == 2 * 16384 * 8192


def test_bytes_follow_the_dtype() -> None:
    f32 = linear.estimate(batch=4, d_in=8, d_out=2)
    f16 = linear.estimate(batch=4, d_in=8, d_out=2, dtype=torch.float16)
    assert f32.bytes == 2 * f16.bytes
    assert f32.intensity == pytest.approx(f32.flops / f32.bytes)


def test_record_table_and_json_list_nested_calls() -> None:
    x, w = torch.randn(4, 8), torch.randn(8, 2)
    with record() as rec:
        linear(x, w)
        linear_explicit(x, w)
    table = rec.table()
    lines = table.splitlines()
    assert lines[0].split() == ["function", "calls", "dims", "formula", "FLOPs", "bytes", "FLOP/B"]
    assert "2*batch*d_in*d_out" in lines[2] and lines[2].startswith("linear ")
    assert lines[-1].startswith("total")
    data = json.loads(rec.to_json())
    assert [call["function"] for call in data["calls"]] == ["linear", "linear_explicit"]
    assert data["total"]["flops"] == 2 * (2 * 4 * 8 * 2)
    assert data["calls"][0]["dims"] == {"batch": 4, "d_in": 8, "d_out": 2}


def test_untracked_arithmetic_is_listed_not_silently_zero() -> None:
    @typed_flops
    def odd(x: Float[Tensor, " n"]) -> Float[Tensor, " n//2+1"]:
        out: Tensor = torch.fft.rfft(x).abs()
        return out

    cost = odd.estimate(n=6)
    assert cost.uncounted == ("_fft_r2c",)
    assert "uncounted ops: _fft_r2c" in str(cost)


def test_a_method_needs_its_object_to_be_estimated() -> None:
    from typedflops.nn import Linear

    layer = Linear(4, 3)
    with pytest.raises(SpecError, match=r"a method needs its object first"):
        Linear.forward.formula  # noqa: B018
    assert str(Linear.forward.estimate(layer, batch=2).formula) == "2*batch*d_in*d_out"
    assert str(layer.forward.formula) == "2*batch*d_in*d_out"  # bound: the object is there


def test_activation_bytes_are_what_autograd_saves() -> None:
    from typedflops.nn import TwoLayerMLP

    model = TwoLayerMLP(16, 32, 8)
    cost = model.estimate(batch=4)
    # x (for w1's gradient) and h1 (for w2's): 4 bytes each element, weights not counted.
    assert cost.activation_bytes == 4 * 4 * (16 + 32)
    assert str(cost.activation_formula) == "4*batch*(d_hidden + d_in)"
    with torch.no_grad():
        assert model.estimate(batch=4).activation_bytes == 0


@typed_flops
def _total(x: Float[Tensor, "_ d"]) -> Float[Tensor, " d"]:
    return x.sum(0)


def test_an_anonymous_axis_is_a_spec_error_naming_the_way_to_give_its_size() -> None:
    # (it was built at 1, and its formula `d` marked exact, where a run of 7 rows adds 28)
    with pytest.raises(SpecError) as caught:
        _total.estimate(d=4)
    assert str(caught.value) == (
        "_total.estimate(): argument 'x' (Float[Tensor, \"_ d\"]): axis 0 is anonymous ('_', "
        "any size), so a dry run has no size to build it at; name the dim in the annotation, "
        "or give the input with a size there: typedflops.estimate(_total, x=Float[Tensor, "
        "'8 d'], ...)"
    )
    cost = typedflops.estimate(_total, x=Float[Tensor, "7 d"], d=4)
    assert (cost.flops, str(cost.formula)) == (28, "7*d")


@typed_flops
def _summed(xs: list[Float[Tensor, "n d"]]) -> Float[Tensor, "n d"]:
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return total


def test_a_list_of_tensors_is_given_as_annotations_or_as_tensors() -> None:
    built = _summed.estimate(xs=[Float[Tensor, "n d"]] * 3, n=3, d=4)
    assert built.flops == 2 * 3 * 4 and built.exact
    assert str(built.formula) == "2*d*n"
    given = _summed.estimate(xs=[torch.ones(3, 4)] * 3, n=3, d=4)  # (meta copies, fixed sizes)
    assert given.flops == 2 * 3 * 4
    with pytest.raises(SpecError, match=r"pass xs=\.\.\. \(its value, or a list or dict of"):
        _summed.estimate(n=3, d=4)


@typed_flops
def _summed_through(
    xs: list[Float[Tensor, "n d"]], w: Float[Tensor, "d e"]
) -> Float[Tensor, "n e"]:
    total = xs[0] @ w
    for x in xs[1:]:
        total = total + x @ w
    return total


@dataclasses.dataclass
class _Pair:
    a: Float[Tensor, "n d"]
    b: Float[Tensor, "n d"]


@typed_flops
def _pair_through(pair: _Pair, w: Float[Tensor, "d e"]) -> Float[Tensor, "n e"]:
    return (pair.a + pair.b) @ w


def test_a_container_given_as_annotations_leaves_the_other_tensors_built_from_theirs() -> None:
    # three products 2·n·d·e and two adds n·e; the pair's add n·d and one product
    n, d, e = sympy.symbols("n d e")
    listed = _summed_through.estimate(xs=[Float[Tensor, "n d"]] * 3, n=2, d=4, e=5)
    assert sympy.expand(listed.formula - (3 * 2 * n * d * e + 2 * n * e)) == 0 and listed.exact
    rows: Any = Float[Tensor, "n d"]  # (an annotation where the dataclass holds a tensor)
    paired = _pair_through.estimate(pair=_Pair(rows, rows), n=2, d=4, e=5)
    assert sympy.expand(paired.formula - (n * d + 2 * n * d * e)) == 0 and paired.exact
    with record() as rec:
        _summed_through([torch.randn(2, 4)] * 3, torch.randn(4, 5))
        _pair_through(_Pair(torch.randn(2, 4), torch.randn(2, 4)), torch.randn(4, 5))
    assert rec.total.flops == listed.flops + paired.flops == 3 * 80 + 20 + 8 + 80
