"""A decorated generator's call is a row of its own in ``record()``: each step's ops are
its own (the consumer's between steps are not), however the generator is advanced and
ended, and the rows always sum to the total.

Hand counts: a step multiplies a (2, 16) chunk by a (16, 16) weight, 2*2*16*16 = 1,024
FLOPs; the consumer multiplies each (2, 16) item by a (16, 4) matrix, 2*2*16*4 = 256; a
generator's ``finally`` block multiplies one (1, 16) row by the weight, 2*1*16*16 = 512.
Every op is a matrix product, so ``FlopCounterMode`` counts the same total.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import AsyncGenerator, Generator, Iterator
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record, typed_flops
from typedflops.cost.engine.recorder import loose_counts, torch_counts
from typedflops.cost.engine.report import Recorder

STEP = 2 * 2 * 16 * 16  # one chunk times the weight
USE = 2 * 2 * 16 * 4  # the consumer's product with one item
CLEANUP = 2 * 1 * 16 * 16  # the finally block's product

X = torch.randn(8, 16)
W = torch.randn(16, 16)
V = torch.randn(16, 4)


class Skip(Exception):
    """Thrown into :func:`chunks`: it skips a chunk and goes on."""


@typed_flops
def chunks(
    x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]
) -> Generator[Float[Tensor, "2 d"], None, None]:
    for start in range(0, x.shape[0], 2):
        try:
            yield x[start : start + 2] @ w
        except Skip:
            continue


@typed_flops
def cleaned(
    x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]
) -> Generator[Float[Tensor, "2 d"], None, None]:
    try:
        for start in range(0, x.shape[0], 2):
            yield x[start : start + 2] @ w
    finally:
        _ = x[:1] @ w


@typed_flops
def scaled(
    x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]
) -> Generator[Float[Tensor, "2 d"], Tensor | None, None]:
    """Yields each chunk times the weight times what was sent (a (16, 16) matrix)."""
    factor = w
    for start in range(0, x.shape[0], 2):
        sent = yield x[start : start + 2] @ factor
        if sent is not None:
            factor = w @ sent  # 2*16*16*16 = 8,192 FLOPs


@typed_flops
def both(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Iterator[Float[Tensor, "2 d"]]:
    yield from chunks(x[:4], w)
    yield x[4:6] @ w
    yield from chunks(x[6:], w)


@typed_flops
def consumed(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "n d"]:
    return torch.cat(list(chunks(x, w)))


def _rows(rec: Recorder) -> list[tuple[str, int, int, int]]:
    return [(r["function"], r["depth"], r["calls"], r["flops"]) for r in rec.rows()]


def _outside(rec: Recorder) -> int:
    return loose_counts(rec.session).forward


def _summed(rec: Recorder) -> int:
    """The top-level rows times their calls, and the ops outside any call."""
    return sum(row.calls * row.cost().flops for row in rec.calls) + _outside(rec)


def _use(items: Iterator[Tensor]) -> None:
    for item in items:
        _ = item @ V


def test_consumed_fully() -> None:
    with record() as rec, FlopCounterMode(display=False) as counter:
        _use(chunks(X, W))
    assert _rows(rec) == [("chunks", 0, 1, 4 * STEP)]
    assert _outside(rec) == 4 * USE
    assert rec.total.flops == _summed(rec) == counter.get_total_flops() == 4 * STEP + 4 * USE
    assert "chunks" in rec.table()


def test_consumed_inside_a_decorated_call() -> None:
    with record() as rec:
        consumed(X, W)
        consumed(X, W)
    assert _rows(rec) == [("consumed", 0, 2, 4 * STEP), ("chunks", 1, 2, 4 * STEP)]
    assert rec.total.flops == _summed(rec) == 8 * STEP


def test_loop_left_early_closes_it_by_collection() -> None:
    with record() as rec, FlopCounterMode(display=False) as counter:
        for item in cleaned(X, W):
            _ = item @ V
            break
        gc.collect()
    # one step, then the finally block as the generator was collected
    assert _rows(rec) == [("cleaned", 0, 1, STEP + CLEANUP)]
    assert rec.total.flops == _summed(rec) == counter.get_total_flops() == STEP + CLEANUP + USE


def test_closed_by_hand() -> None:
    with record() as rec:
        generator = cleaned(X, W)
        next(generator)
        next(generator)
        generator.close()
    assert _rows(rec) == [("cleaned", 0, 1, 2 * STEP + CLEANUP)]
    assert rec.total.flops == _summed(rec)


def test_paused_when_its_record_closes() -> None:
    with record() as first:
        generator = chunks(X, W)
        next(generator)
        # read inside the block: what its step ran so far
        assert first.total.flops == _summed(first) == STEP
    assert _rows(first) == [("chunks", 0, 1, STEP)]
    next(generator)  # outside any record: no record's
    with record() as second:
        rest = list(generator)
    assert len(rest) == 2
    assert first.total.flops == STEP
    assert _rows(second) == [("chunks", 0, 1, 2 * STEP)]
    assert second.total.flops == _summed(second) == 2 * STEP


def test_collected_in_a_later_record() -> None:
    with record() as first:
        plain = chunks(X, W)
        cleaning = cleaned(X, W)
        next(plain)
        next(cleaning)
    with record() as second:
        del plain, cleaning
        gc.collect()
    assert _rows(first) == [("chunks", 0, 1, STEP), ("cleaned", 0, 1, STEP)]
    # closed there: only the finally block runs, in the record open then
    assert _rows(second) == [("cleaned", 0, 1, CLEANUP)]
    assert second.total.flops == _summed(second) == CLEANUP


def test_closed_on_another_thread() -> None:
    with record() as rec:
        generator = cleaned(X, W)
        next(generator)
        closer = threading.Thread(target=generator.close)
        closer.start()
        closer.join()
        _ = X @ W
    # its finally block ran on the other thread, which no record of it sees; its row
    # holds its step, ended when the record closed
    assert _rows(rec) == [("cleaned", 0, 1, STEP)]
    assert rec.total.flops == _summed(rec) == STEP + 2 * 8 * 16 * 16


def test_read_inside_a_step() -> None:
    seen: list[tuple[int, int]] = []

    @typed_flops
    def reading(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Iterator[Float[Tensor, "2 d"]]:
        for start in range(0, x.shape[0], 2):
            out = x[start : start + 2] @ w
            seen.append((rec.total.flops, _summed(rec)))
            yield out

    with record() as rec:
        generator = reading(X, W)
        next(generator)
        next(generator)
        between = (rec.total.flops, _summed(rec))
    assert seen == [(STEP, STEP), (2 * STEP, 2 * STEP)]
    assert between == (2 * STEP, 2 * STEP)
    assert _rows(rec) == [("reading", 0, 1, 2 * STEP)]


def test_backward_through_what_it_yields() -> None:
    w = W.clone().requires_grad_()
    with record() as rec, FlopCounterMode(display=False) as counter:
        outs = [item @ V for item in chunks(X, w)]
        torch.cat(outs).sum().backward()
    total = rec.total
    rows = sum(row.calls * row.cost().backward_flops for row in rec.calls)
    assert total.flops == _summed(rec)
    assert total.backward_flops == rows + loose_counts(rec.session).backward
    # matrix products: forward 4 steps and 4 uses; backward the weight's gradient of each
    # step, the item's gradient of each use (V takes none)
    assert torch_counts(rec.session.root) == (4 * STEP + 4 * USE, 4 * STEP + 4 * USE)
    assert sum(torch_counts(rec.session.root)) == counter.get_total_flops()


def test_created_outside_any_record() -> None:
    generator = chunks(X, W)
    next(generator)
    with record() as rec:
        _use(generator)
    assert _rows(rec) == [("chunks", 0, 1, 3 * STEP)]
    assert rec.total.flops == _summed(rec) == 3 * STEP + 3 * USE


def test_thrown_in_and_caught() -> None:
    with record() as rec, FlopCounterMode(display=False) as counter:
        generator = chunks(X, W)
        next(generator)
        generator.throw(Skip())  # skips the first chunk: the step yields the second
        _use(generator)  # two more
    assert _rows(rec) == [("chunks", 0, 1, 4 * STEP)]
    assert rec.total.flops == _summed(rec) == counter.get_total_flops() == 4 * STEP + 2 * USE


def test_thrown_in_and_raised_gives_its_ops_to_its_caller() -> None:
    with record() as rec:
        generator = cleaned(X, W)
        next(generator)
        with pytest.raises(ValueError):
            generator.throw(ValueError("stop"))
    # as a decorated function that raised: its ops (its finally block's too) are the caller's
    assert _rows(rec) == []
    assert rec.total.flops == _outside(rec) == STEP + CLEANUP


def test_values_sent() -> None:
    sent = torch.randn(16, 16)
    with record() as rec, FlopCounterMode(display=False) as counter:
        generator = scaled(X, W)
        next(generator)
        generator.send(sent)  # w @ sent, then a chunk
        list(generator)
    assert _rows(rec) == [("scaled", 0, 1, 4 * STEP + 2 * 16 * 16 * 16)]
    assert rec.total.flops == _summed(rec) == counter.get_total_flops()


def test_nested_generators() -> None:
    with record() as rec, FlopCounterMode(display=False) as counter:
        _use(both(X, W))
    # the first inner generator ran two steps, the second one
    assert _rows(rec) == [
        ("both", 0, 1, 4 * STEP),
        ("chunks", 1, 1, 2 * STEP),
        ("chunks", 1, 1, STEP),
    ]
    assert rec.total.flops == _summed(rec) == counter.get_total_flops() == 4 * STEP + 4 * USE


def test_nested_generators_left_early() -> None:
    with record() as rec:
        generator = both(X, W)
        next(generator)
        next(generator)
        next(generator)  # both's own chunk: the first inner generator has ended
        next(generator)  # the second inner one's first step
        del generator
        gc.collect()
    assert _rows(rec) == [
        ("both", 0, 1, 4 * STEP),
        ("chunks", 1, 1, 2 * STEP),
        ("chunks", 1, 1, STEP),
    ]
    assert rec.total.flops == _summed(rec) == 4 * STEP


def test_nested_records() -> None:
    with record() as outer:
        generator = chunks(X, W)
        next(generator)
        with record() as inner:
            next(generator)
            next(generator)
        next(generator)
    assert _rows(inner) == [("chunks", 0, 1, 2 * STEP)]
    assert _rows(outer) == [("chunks", 0, 1, 4 * STEP)]
    assert outer.total.flops == _summed(outer) == 4 * STEP
    assert inner.total.flops == _summed(inner) == 2 * STEP


def test_record_opened_in_a_step_and_closed_in_a_later_one() -> None:
    opened: list[Recorder] = []

    @typed_flops
    def spans(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Iterator[Float[Tensor, "2 d"]]:
        with record() as inner:
            opened.append(inner)
            yield x[:2] @ w  # run inside the inner record's block: its own ops
            yield x[2:4] @ w  # a step the inner record sees: the generator's row
        yield x[4:6] @ w  # after the inner record closed

    with record() as outer, FlopCounterMode(display=False) as counter:
        _use(spans(X, W))
    inner = opened[0]
    assert _rows(outer) == [("spans", 0, 1, 3 * STEP)]
    assert outer.total.flops == _summed(outer) == counter.get_total_flops() == 3 * STEP + 3 * USE
    assert _rows(inner) == [("spans", 0, 1, STEP)]
    assert inner.total.flops == _summed(inner) == 2 * STEP + 2 * USE


def test_context_manager_made_of_one() -> None:
    @contextlib.contextmanager
    @typed_flops
    def scope(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Iterator[Float[Tensor, "n d"]]:
        y = x @ w  # 2*8*16*16 = 4,096
        try:
            yield y
        finally:
            _ = y @ w  # 4,096

    with record() as rec, FlopCounterMode(display=False) as counter:
        with scope(X, W) as y:
            _ = y @ W
        with pytest.raises(KeyError), scope(X, W) as y:
            raise KeyError
    # the second raised out of its body (the block's error thrown in): its ops are the caller's
    assert _rows(rec) == [("scope", 0, 1, 2 * 4096)]
    assert rec.total.flops == _summed(rec) == counter.get_total_flops() == 5 * 4096


def test_advanced_from_two_threads_in_turn() -> None:
    generator = chunks(X, W)
    records: list[Recorder] = []

    def steps(count: int) -> None:
        with record() as rec:
            for _ in range(count):
                next(generator)
        records.append(rec)

    with record() as main:
        next(generator)
        worker = threading.Thread(target=steps, args=(2,))
        worker.start()
        worker.join()
        next(generator)
    # each thread's record counts the steps run in it (as FlopCounterMode: per thread)
    assert _rows(records[0]) == [("chunks", 0, 1, 2 * STEP)]
    assert _rows(main) == [("chunks", 0, 1, 2 * STEP)]
    assert main.total.flops == _summed(main) == 2 * STEP


def test_async_generator() -> None:
    @typed_flops
    async def batches(
        x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]
    ) -> AsyncGenerator[Float[Tensor, "2 d"], None]:
        for start in range(0, x.shape[0], 2):
            await asyncio.sleep(0)
            yield x[start : start + 2] @ w

    async def consume(taken: int) -> int:
        with record() as rec:
            count = 0
            generator = batches(X, W)
            async for item in generator:
                _ = item @ V
                count += 1
                if count == taken:
                    break
            await generator.aclose()
        assert rec.total.flops == _summed(rec)
        assert _rows(rec) == [("batches", 0, 1, taken * STEP)]
        return int(rec.total.flops)

    async def both_tasks() -> list[int]:
        return list(await asyncio.gather(consume(4), consume(1)))

    assert asyncio.run(both_tasks()) == [4 * STEP + 4 * USE, STEP + USE]


ACTIONS = st.lists(
    st.sampled_from(["next", "use", "throw", "send", "close", "drop", "raise"]), max_size=8
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=ACTIONS, rows=st.integers(min_value=1, max_value=5))
def test_any_way_of_advancing_it(actions: list[str], rows: int) -> None:
    """Take some items, use some, throw in, send, close, drop or raise into it: the rows
    sum to the total, the total is FlopCounterMode's, and the generator's row (or its
    caller, where it raised) holds what its steps ran."""
    x = torch.randn(2 * rows, 16)
    sent = torch.randn(16, 16)
    ran = 0  # the generator's own FLOPs, counted by hand
    raised = False
    with record() as rec, FlopCounterMode(display=False) as counter:

        @typed_flops
        def steps(
            x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]
        ) -> Generator[Float[Tensor, "2 d"], Tensor | None, None]:
            factor = w
            try:
                for start in range(0, x.shape[0], 2):
                    try:
                        got = yield x[start : start + 2] @ factor
                    except Skip:
                        continue
                    if got is not None:
                        factor = w @ got
            finally:
                _ = x[:1] @ w

        generator: Any = steps(x, W)
        started = done = False
        item: Any = None
        for action in actions:
            if done:
                break
            if action == "use":
                if item is not None:
                    _ = item @ V
            elif action in ("close", "drop"):
                if action == "close":
                    generator.close()
                else:
                    generator = None
                    gc.collect()
                ran += CLEANUP if started else 0  # (one never started runs nothing)
                done = True
            elif action == "raise":
                if started:
                    with pytest.raises(ValueError):
                        generator.throw(ValueError("stop"))
                    ran += CLEANUP
                    done = raised = True
            elif action == "next" or started:
                # a step: a chunk, after w @ sent for a send (2*16*16*16 FLOPs)
                cost = STEP + (2 * 16 * 16 * 16 if action == "send" else 0)
                try:
                    if action == "next":
                        item = next(generator)
                    elif action == "throw":
                        item = generator.throw(Skip())
                    else:
                        item = generator.send(sent)
                    ran += cost
                    started = True
                except StopIteration:
                    # (no chunk left: the loop ended and the finally block ran)
                    ran += cost - STEP + CLEANUP
                    done = True
        if started and not done:
            generator.close()
            ran += CLEANUP
    assert rec.total.flops == _summed(rec) == counter.get_total_flops()
    own = [row for row in _rows(rec) if row[0] == "steps"]
    if raised or not started:
        assert own == []
    else:
        assert own == [("steps", 0, 1, ran)]
    assert rec.total.flops == ran + _outside(rec) - (ran if raised else 0)
