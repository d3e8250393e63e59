"""A record sees what its own thread and task run inside its block, in whatever context it
runs: a context copied before the record opened (``contextvars.copy_context()`` run in the
block), one copied inside a decorated call that has returned, one copied inside a record
that has closed, a task given an older context. Asyncio tasks that did not start inside
the block still do not count into it.

Oracles: FlopCounterMode around the same block, and the hand count: ``x @ w`` with ``x``
2x4 and ``w`` 4x12 is one product of P = 2 * 2 * 4 * 12 = 192 FLOPs.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Generator

import torch
from jaxtyping import Float
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Recorder, record, typed_flops

P = 2 * 2 * 4 * 12
X = torch.randn(2, 4)
W = torch.randn(4, 12)
_contexts: list[contextvars.Context] = []


@typed_flops
def product(x: Float[Tensor, "n d"], w: Float[Tensor, "d e"]) -> Float[Tensor, "n e"]:
    return x @ w


def plain(x: Tensor, w: Tensor) -> Tensor:
    return x @ w


@typed_flops
def runs_saved(x: Float[Tensor, "n d"], w: Float[Tensor, "d e"]) -> Float[Tensor, "n e"]:
    """``product`` in the context saved first, then a product of its own."""
    _contexts[0].run(product, x, w)
    return x @ w


@typed_flops
def saves(x: Float[Tensor, "n d"], w: Float[Tensor, "d e"]) -> Float[Tensor, "n e"]:
    """A product; its context is kept, to be run after it returns."""
    _contexts.append(contextvars.copy_context())
    return x @ w


def test_a_context_copied_before_the_record_is_counted_in_it() -> None:
    earlier = contextvars.copy_context()
    with FlopCounterMode(display=False) as counter, record() as rec:
        earlier.run(product, X, W)
        earlier.run(plain, X, W)
    assert rec.total.flops == counter.get_total_flops() == 2 * P
    assert [(row.function, row.calls, row.cost().flops) for row in rec.calls] == [("product", 1, P)]


def test_a_copied_context_run_inside_a_call_is_counted_in_that_call() -> None:
    _contexts[:] = [contextvars.copy_context()]
    with FlopCounterMode(display=False) as counter, record() as rec:
        runs_saved(X, W)
    assert rec.total.flops == counter.get_total_flops() == 2 * P
    (row,) = rec.calls
    assert (row.function, row.cost().flops) == ("runs_saved", 2 * P)
    assert [(child.function, child.cost().flops) for child in row.visible_children()] == [
        ("product", P)
    ]


def test_a_context_copied_inside_a_call_that_returned_counts_in_its_caller() -> None:
    _contexts.clear()
    with FlopCounterMode(display=False) as counter, record() as rec:
        saves(X, W)
        _contexts[0].run(plain, X, W)
        _contexts[0].run(product, X, W)
    assert rec.total.flops == counter.get_total_flops() == 3 * P
    assert [(row.function, row.cost().flops) for row in rec.calls] == [
        ("saves", P),
        ("product", P),
    ]


def test_nested_records_both_count_a_context_copied_before_them() -> None:
    earlier = contextvars.copy_context()
    with FlopCounterMode(display=False) as counter, record() as outer, record() as inner:
        earlier.run(plain, X, W)
        earlier.run(product, X, W)
    assert outer.total.flops == inner.total.flops == counter.get_total_flops() == 2 * P


def test_a_context_copied_inside_a_closed_record_counts_only_in_those_still_open() -> None:
    with FlopCounterMode(display=False) as counter, record() as outer:
        with record() as inner:
            inside = contextvars.copy_context()
        inside.run(plain, X, W)
        inside.run(product, X, W)
    assert (outer.total.flops, inner.total.flops) == (2 * P, 0)
    assert counter.get_total_flops() == 2 * P


def test_a_record_in_a_generator_counts_a_context_copied_before_it() -> None:
    def opened() -> Generator[Recorder, None, None]:
        with record() as rec:
            yield rec

    records = opened()
    earlier = contextvars.copy_context()
    rec = next(records)
    earlier.run(plain, X, W)
    plain(X, W)
    records.close()
    plain(X, W)  # (after it closed)
    assert rec.total.flops == 2 * P


def test_a_backward_run_in_a_context_copied_before_the_record_is_counted() -> None:
    x = torch.randn(2, 4, requires_grad=True)
    earlier = contextvars.copy_context()
    with FlopCounterMode(display=False) as counter, record() as rec:
        earlier.run(lambda: product(x, W).sum().backward())
    # forward: the product and a sum of its 2 * 12 values; backward: x's gradient, one
    # product of P (no gradient for W)
    assert (rec.total.flops, rec.total.backward_flops) == (P + 2 * 12, P)
    assert counter.get_total_flops() == 2 * P


# -- asyncio ---------------------------------------------------------------------------------


_tasks: list[asyncio.Task[None]] = []


@typed_flops
async def spawns(x: Float[Tensor, "n d"], w: Float[Tensor, "d e"]) -> Float[Tensor, "n e"]:
    """A product; starts a task that runs two more after this call has returned."""

    async def later() -> None:
        await asyncio.sleep(0)
        plain(x, w)
        product(x, w)

    _tasks.append(asyncio.get_running_loop().create_task(later()))
    return x @ w


def test_a_task_started_in_a_call_that_returned_counts_in_the_record() -> None:
    async def main() -> Recorder:
        with record() as rec:
            await spawns(X, W)
            await _tasks.pop()
        return rec

    rec = asyncio.run(main())
    assert rec.total.flops == 3 * P
    assert [(row.function, row.cost().flops) for row in rec.calls] == [
        ("spawns", P),
        ("product", P),
    ]


def test_interleaved_tasks_count_their_own_copied_contexts_only() -> None:
    async def stale() -> int:
        earlier = contextvars.copy_context()
        with record() as rec:
            earlier.run(plain, X, W)
            await asyncio.sleep(0)
            earlier.run(product, X, W)
            await asyncio.sleep(0)
        return rec.total.flops

    async def fresh() -> int:
        with record() as rec:
            await asyncio.sleep(0)
            plain(X, W)
            await asyncio.sleep(0)
        return rec.total.flops

    async def bare() -> None:
        for _ in range(3):
            await asyncio.sleep(0)
            plain(X, W)

    async def main() -> tuple[int, int, None]:
        return await asyncio.gather(stale(), fresh(), bare())

    assert tuple(asyncio.run(main())) == (2 * P, P, None)


def test_many_tasks_each_count_their_own_copied_contexts() -> None:
    async def task(calls: int) -> int:
        earlier = contextvars.copy_context()
        with record() as rec:
            for _ in range(calls):
                earlier.run(product, X, W)
                await asyncio.sleep(0)
        return rec.total.flops

    async def main() -> list[int]:
        return await asyncio.gather(*(task(1 + k % 3) for k in range(200)))

    assert asyncio.run(main()) == [P * (1 + k % 3) for k in range(200)]


def test_a_record_outside_any_task_counts_tasks_given_older_contexts() -> None:
    earlier = contextvars.copy_context()

    async def work() -> None:
        plain(X, W)
        product(X, W)

    async def main() -> None:
        await asyncio.get_running_loop().create_task(work(), context=earlier)

    with FlopCounterMode(display=False) as counter, record() as rec:
        asyncio.run(main())
    assert rec.total.flops == counter.get_total_flops() == 2 * P
