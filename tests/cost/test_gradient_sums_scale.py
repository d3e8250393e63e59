"""Gradient sums over a deep model: what a record keeps while edges wait is trimmed to what is
still needed once per doubling, so that a forward through thousands of blocks costs time
linear in its ops, and counts as a shallow one does."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record
from typedflops.cost.engine.recording import thread_mode

_BLOCKS = 5000


def _forward(layers: nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        x = torch.relu(layer(x))
    return x


def test_a_deep_forward_trims_the_copies_autograd_saves_once_per_doubling() -> None:
    # Each ReLU's output is saved for its backward as a detached copy, alive until then:
    # 5,000 copies, more than the first trim's 4,096, which keeps every one: the next trim
    # waits for twice as many (a trim on every copy past 4,096 made the record quadratic).
    torch.manual_seed(0)
    layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(_BLOCKS))
    x = torch.randn(2, 4)
    with record() as held:
        y = _forward(layers, x)
        mode = thread_mode()
        assert mode is not None
        copies = len(mode.sums.detached)
        assert copies > 4096
        assert mode.sums._copies_limit >= copies
    with record() as ran, FlopCounterMode(display=False) as torch_counts:
        _forward(layers, x).sum().backward()
    # addmm of 2x4 by 4x4: 2·2·4·4 = 64 FLOPs a block, as FlopCounterMode counts it
    assert held.total.matmul_flops == _BLOCKS * 64
    assert ran.total.matmul_flops == _BLOCKS * 64
    # the backward predicted for the held output is the one that ran: every block's
    # weight gradient (64), every block's input gradient but the first's (64), FlopCounterMode's
    assert held.total.backward_flops == ran.total.backward_flops
    assert torch_counts.get_total_flops() == _BLOCKS * 64 + (2 * _BLOCKS - 1) * 64
    del y
