"""A record opened inside a reentrant ``torch.utils.checkpoint`` region sees the region's
forward run again in the backward: once the backward has run, its total names those ops as
the record around the backward does, recomputed (``recompute_flops``), not backward. Read
while the region's backward runs, before torch differentiates what it ran again, the count
is marked not exact; a later read is the settled one.

Hand counts: ``second(relu(first(x)))`` with two ``nn.Linear(16, 16)`` and ``x`` 8 x 16:
two products of 2·8·16·16 = 4,096 and a relu of 128, 8,320 run again; FlopCounterMode
around the same block counts 8·4,096 (the forward's two products, their two run again, and
the backward's four).
"""

from __future__ import annotations

import torch
from filled import ones
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Recorder, record

REGION = 2 * 4096 + 128


def test_a_record_in_a_region_run_again_counts_it_as_recomputed() -> None:
    torch.manual_seed(0)
    first, second = nn.Linear(16, 16), nn.Linear(16, 16)
    opened: list[tuple[Recorder, bool]] = []

    def block(x: Tensor) -> Tensor:
        with record() as inside:
            out: Tensor = second(torch.relu(first(x)))
        opened.append((inside, inside.total.exact))
        return out

    x = ones(8, 16).requires_grad_()
    with FlopCounterMode(display=False) as counter, record() as outer:
        checkpoint(block, x, use_reentrant=True).sum().backward()
    assert counter.get_total_flops() == 8 * 4096
    assert outer.total.recompute_flops == REGION
    forward, *_, again = opened  # (the first run, and the one in the backward)
    assert (forward[0].total.flops, forward[0].total.recompute_flops) == (REGION, 0)
    assert not again[1]  # (read before the region's ops were told apart)
    total = again[0].total
    assert (total.flops, total.backward_flops, total.recompute_flops) == (0, 0, REGION)
