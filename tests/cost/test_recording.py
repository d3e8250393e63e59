"""record(): rows per signature, nothing held, async calls, recursion, and estimate's sizes."""

from __future__ import annotations

import asyncio
import gc
import re
import weakref

import numpy as np
import pytest
import sympy
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import SpecError, record, register_rule, typed_flops


@typed_flops
def linear(x: Float[Tensor, "b d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "b k"]:
    return x @ w


@typed_flops
async def linear_async(x: Float[Tensor, "b d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "b k"]:
    await asyncio.sleep(0)
    return x @ w


@typed_flops
def countdown(x: Float[Tensor, " n"], depth: int) -> Float[Tensor, " n"]:
    return x if depth == 0 else countdown(x * 2, depth - 1)


def test_repeated_calls_share_a_row() -> None:
    x, w = torch.ones(4, 3), torch.ones(3, 2)
    with record() as rec:
        for _ in range(1000):
            linear(x, w)
        linear(torch.ones(5, 3), w)
    assert [(row.calls, row.dims["b"]) for row in rec.calls] == [(1000, 4), (1, 5)]
    assert rec.total.flops == 1000 * 48 + 60
    b, b_2, d, k = sympy.symbols("b b_2 d k")
    assert sympy.expand(rec.total.formula - (1000 * 2 * b * d * k + 2 * b_2 * d * k)) == 0


def test_record_holds_no_tensor() -> None:
    refs = []
    with record() as rec:
        for _ in range(20):
            x, w = torch.ones(4, 3), torch.ones(3, 2)
            refs.append(weakref.ref(x))
            refs.append(weakref.ref(linear(x, w)))
            del x, w
        gc.collect()
        assert all(ref() is None for ref in refs)
    assert rec.total.flops == 20 * 48
    assert str(rec.calls[0].cost().formula) == "2*b*d*k"


def test_async_calls_are_rows_and_estimates() -> None:
    assert str(linear_async.formula) == "2*b*d*k"
    assert linear_async.estimate(b=2, d=3, k=4).flops == 48

    async def main() -> None:
        with record() as rec:
            x, w = torch.ones(5, 3), torch.ones(3, 4)
            await linear_async(torch.ones(2, 3), w)
            await asyncio.gather(linear_async(x, w), linear_async(x, w))
        assert [row.calls for row in rec.calls] == [1, 2]
        assert rec.total.flops == 48 + 2 * 120
        assert all(row.cost().exact for row in rec.calls)

    asyncio.run(main())


def test_recursion_records_one_row_per_depth() -> None:
    with record() as rec:
        countdown(torch.ones(3), 200)
    depth = 0
    rows = rec.calls
    while rows:
        depth += 1
        rows = rows[0].visible_children()
    assert depth == 201
    assert rec.total.flops == 200 * 3


@pytest.mark.parametrize(
    ("size", "message"),
    [
        (8.0, "b=8.0 is not a size; sizes are integers (got float)"),
        (-1, "b=-1 is negative; sizes are >= 0"),
        (True, "b=True is not a size; sizes are integers (got bool)"),
        (2**70, "is too large for a tensor size (at most 2**62)"),
        ((2, 3), "b=(2, 3) is a tuple, but b is one axis"),
        ("8", "b='8' is not a size"),
        (None, "b=None is not a size"),
    ],
)
def test_bad_sizes_are_spec_errors(size: object, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        linear.estimate(b=size, d=3, k=4)


def test_numpy_integers_are_sizes() -> None:
    assert linear.estimate(b=np.int64(8), d=np.int32(3), k=4).flops == 2 * 8 * 3 * 4


def test_a_registered_python_function_replaces_what_it_runs() -> None:
    def fused(x: Tensor) -> Tensor:
        return torch.exp(x) * 2

    @register_rule(fused)
    def fused_flops(x: Tensor) -> int:
        return 5 * x.numel()

    @typed_flops
    def body(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return fused(x) + 1

    with record() as rec:
        body(torch.ones(6))
    assert rec.total.flops == 5 * 6 + 6
    assert str(body.estimate(n=10).formula) == "6*n"


def test_a_record_fills_every_field_an_estimate_does() -> None:
    from typedflops.nn import TwoLayerMLP
    from typedflops.planning import step_mfu

    model = TwoLayerMLP(16, 32, 8)
    x = torch.randn(4, 16)
    with record() as rec:
        model(x)
    cost, estimated = rec.total, model.estimate(batch=4)
    assert (cost.flops, cost.backward_flops) == (estimated.flops, estimated.backward_flops)
    assert cost.matmul_flops == estimated.matmul_flops == 2 * 4 * 32 * (16 + 8)
    assert cost.activation_bytes == estimated.activation_bytes > 0
    (row,) = rec.calls
    assert row.cost().matmul_formula == estimated.matmul_formula
    assert step_mfu(cost, 1e-3, peak=1e12) == 3 * cost.matmul_flops / 1e-3 / 1e12


@pytest.mark.parametrize("target", [None, "cpu", "cuda"])
def test_a_record_on_meta_counts_what_an_estimate_does(target: str | None) -> None:
    """GPT-2's attention (d_model 768, 12 heads) on meta tensors: record() and estimate()
    cost the same kernels, those kernels_of() names (meta's own without it)."""
    from typedflops.nn.attention import Attention
    from typedflops.planning import kernels_of

    on_meta = Attention(768, 12, bias=True, device="meta")
    x = torch.empty(2, 128, 768, device="meta")
    with kernels_of(target):
        with record() as rec:
            on_meta(x)
        estimated = on_meta.estimate(batch=2, seq=128)
    assert (rec.total.flops, rec.total.backward_flops) == (
        estimated.flops,
        estimated.backward_flops,
    )
    assert rec.total.matmul_flops == estimated.matmul_flops
    if target == "cpu":  # and the kernels of a call that runs on a CPU
        on_cpu = Attention(768, 12, bias=True).estimate(batch=2, seq=128)
        assert (rec.total.flops, rec.total.backward_flops) == (
            on_cpu.flops,
            on_cpu.backward_flops,
        )


def test_the_table_shows_the_ops_outside_calls_so_that_its_bytes_add_up() -> None:
    """Making the inputs inside the block writes their bytes: the total counts them, and
    the table says where they went (a row of their own) instead of leaving a gap."""
    with record() as rec:
        x, w = torch.randn(8, 784), torch.randn(784, 10)  # 4 * (8*784 + 784*10) bytes
        linear(x, w)
    lines = rec.table().splitlines()
    outside = next(line for line in lines if line.startswith("(outside calls)"))
    assert outside.split()[-3:] == ["0", "56.4k", "0"]
    (row,) = rec.calls
    cost = row.cost()
    assert rec.total.bytes == cost.bytes + 4 * (8 * 784 + 784 * 10)
    assert rec.total.flops == cost.flops


def test_no_outside_row_when_everything_ran_in_calls() -> None:
    x, w = torch.ones(4, 3), torch.ones(3, 2)
    with record() as rec:
        linear(x, w)
    assert "(outside calls)" not in rec.table()
