"""record()'s promise for threads, with the pools users start threads from: a record counts
what its own thread (and the asyncio tasks it starts) runs; a ``ThreadPoolExecutor``'s or
``asyncio.to_thread``'s worker is another thread, whose ops count in the records that
worker opens, each on its own, its threads reused or not. FlopCounterMode, whose modes are
its thread's, counts the same.

Hand count: ``x @ w`` with ``x`` n x 8 and ``w`` 8 x 8 is 2·n·8·8 = 128·n FLOPs.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import torch
from jaxtyping import Float
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record, typed_flops

W = torch.randn(8, 8)


@typed_flops
def product(x: Float[Tensor, "n 8"]) -> Float[Tensor, "n 8"]:
    """One product with ``W``: 128·n FLOPs."""
    return x @ W


def _recorded(n: int) -> tuple[int, int]:
    """``n`` calls at ``n`` rows in a record of this thread: its total and matmul FLOPs."""
    with record() as rec:
        for _ in range(n):
            product(torch.ones(n, 8))
    return rec.total.flops, rec.total.matmul_flops


def test_a_pools_workers_count_in_their_own_records_not_in_the_callers() -> None:
    with FlopCounterMode(display=False) as counter, record() as outer:
        product(torch.ones(2, 8))
        with ThreadPoolExecutor(max_workers=3) as pool:
            found = list(pool.map(_recorded, [1, 2, 3, 4, 5, 6] * 3))
            list(pool.map(lambda n: product(torch.ones(n, 8)), [1, 2, 3]))
    assert found == [(128 * n * n, 128 * n * n) for n in [1, 2, 3, 4, 5, 6] * 3]
    assert outer.total.flops == outer.total.matmul_flops == counter.get_total_flops() == 256
    assert [(row.function, row.calls) for row in outer.calls] == [("product", 1)]


def test_a_to_thread_worker_counts_in_its_own_record_not_in_the_tasks() -> None:
    async def main() -> tuple[int, list[tuple[int, int]]]:
        with record() as outer:
            product(torch.ones(3, 8))
            found = await asyncio.gather(*(asyncio.to_thread(_recorded, n) for n in (1, 2, 4)))
            await asyncio.to_thread(product, torch.ones(5, 8))
        return outer.total.flops, found

    total, found = asyncio.run(main())
    assert total == 128 * 3
    assert found == [(128 * n * n, 128 * n * n) for n in (1, 2, 4)]
