"""Weight normalisation's fused kernel (``_weight_norm_interface``, which
``nn.utils.parametrizations.weight_norm`` runs over the first or the last dim), forward and
backward, held against hand counts on a real CPU run (``record()``) and on meta
(``estimate()``): one count for both.

``Linear(4, 3)`` on a batch of 2: its weight v is 3 by 4 (V = 12 values); the product 48 FLOPs
(2·2·4·3), the bias's gradient 6 and the weight's 48.
"""

from __future__ import annotations

import pytest
import torch
from jaxtyping import Float
from torch import Tensor
from torch.nn.utils.parametrizations import weight_norm

import typedflops
from typedflops import record

V = 12
PRODUCT = 48

# G norms (dim 0: one per output row, 3; dim 1: one per input column, 4): forward each
# norm's squares and adds (2·V) and roots, g/‖v‖ per norm, a multiply per value: 3·V + 2·G;
# backward Σ grad_w·v (2·V), grad_v = a·grad_w - b·v (3·V), per norm grad_g, a and b (4·G)
CASES = [(0, 3 * V + 2 * 3, 5 * V + 4 * 3), (1, 3 * V + 2 * 4, 5 * V + 4 * 4)]


@pytest.mark.parametrize(("dim", "norm", "norm_backward"), CASES, ids=["dim-0", "dim-1"])
def test_weight_norm_counts_its_norms_and_scales_on_a_cpu_and_on_meta(
    dim: int, norm: int, norm_backward: int
) -> None:
    torch.manual_seed(0)
    model = weight_norm(torch.nn.Linear(4, 3), dim=dim)
    forward, backward = norm + PRODUCT, norm_backward + PRODUCT + 6
    with record() as rec:
        model(torch.randn(2, 4))
    assert (rec.total.flops, rec.total.backward_flops, rec.total.uncounted) == (
        forward,
        backward,
        (),
    )
    cost = typedflops.estimate(model, Float[Tensor, "b d"], b=2, d=4)
    assert (cost.flops, cost.backward_flops, cost.uncounted, cost.exact) == (
        forward,
        backward,
        (),
        True,
    )


def test_weight_norm_backward_that_ran_is_counted() -> None:
    # the backward kernel run by autograd inside the record, as predicted (the sum's 6 adds
    # forward; its backward an expand, 0)
    model = weight_norm(torch.nn.Linear(4, 3), dim=0)
    with record() as rec:
        model(torch.randn(2, 4)).sum().backward()
    assert (rec.total.flops, rec.total.backward_flops, rec.total.uncounted) == (
        3 * V + 6 + PRODUCT + 6,
        5 * V + 12 + PRODUCT + 6,
        (),
    )
