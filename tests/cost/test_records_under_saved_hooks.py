"""A record read under the user's saved-tensor hooks (``torch.autograd.graph.save_on_cpu``,
a non-reentrant ``torch.utils.checkpoint`` region) predicts its backward on meta tensors of
its own: the user's hooks never pack them, so the region's backward still runs and the
prediction is what a real backward runs.

Hand counts, ``relu(lin(x))`` with ``lin = nn.Linear(16, 16)`` and ``x`` 8 x 16 needing
grad: forward the product 2·8·16·16 = 4,096 (``addmm``'s bias not counted) and the relu's
128, 4,224; backward the weight's and the input's products 4,096 each, the bias's sum 128
and the relu's 128, 8,448. Two layers with a relu between: 8,320 forward; backward each
layer's weight's and input's products and bias's sum, and the relu's: 4·4,096 + 3·128 =
16,768.
"""

from __future__ import annotations

import torch
from filled import ones
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from typedflops import record

FORWARD, BACKWARD = 4096 + 128, 2 * 4096 + 128 + 128


def _layer() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(16, 16)


def test_a_record_read_under_save_on_cpu_predicts_the_backward_that_runs() -> None:
    lin, x = _layer(), ones(8, 16).requires_grad_()
    with torch.autograd.graph.save_on_cpu():
        with record() as predicted:
            torch.relu(lin(x))
        cost = predicted.total
    with record() as ran:
        torch.relu(lin(x)).backward(ones(8, 16))
    assert (cost.flops, cost.backward_flops, cost.uncounted) == (FORWARD, BACKWARD, ())
    assert ran.total.backward_flops == BACKWARD
    with record() as later:  # (nothing of the hooks' run is kept for later records)
        torch.relu(lin(x))
    assert (later.total.backward_flops, later.total.uncounted) == (BACKWARD, ())


def test_a_record_read_inside_a_checkpointed_region_leaves_its_backward_to_run() -> None:
    first, second = _layer(), _layer()
    seen: list[tuple[int, int]] = []

    def block(x: Tensor) -> Tensor:
        with record() as inside:
            out: Tensor = second(torch.relu(first(x)))
        seen.append((inside.total.flops, inside.total.backward_flops))
        return out

    x = ones(8, 16).requires_grad_()
    checkpoint(block, x, use_reentrant=False).sum().backward()
    assert x.grad is not None
    assert first.weight.grad is not None
    assert seen[0] == (2 * 4096 + 128, 4 * 4096 + 3 * 128)
