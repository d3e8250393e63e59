"""Fused loss kernels and the gated linear unit, forward and backward, held against hand counts
on a real CPU run (``record()``) and on meta (``estimate()``): one count for both.

N is the loss's element count: a=5, b=3 gives N = 15.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from jaxtyping import Float
from kernel_counts import Counts, flop_counter_total, on_cpu, on_meta
from torch import Tensor

import typedflops
from typedflops import record
from typedflops.errors import DryRunError

N = 15
AB = Float[Tensor, "a b"]
SIZES = {"a": 5, "b": 3}


def _half(x: Tensor) -> Tensor:
    return torch.full_like(x, 0.5)


def _first(x: Tensor) -> Tensor:
    return torch.zeros(x.shape[0], dtype=torch.long, device=x.device)


def _ones(x: Tensor) -> Tensor:
    return torch.ones(x.shape[1], dtype=x.dtype, device=x.device)


def _image(x: Tensor) -> Tensor:
    return x.t().reshape(1, x.shape[1], x.shape[0], 1)  # 3 classes at 5 x 1 positions


CASES: list[tuple[str, Any, int, int]] = [
    # a subtract and a square per element; the mean's adds and its divide. Backward:
    # 2/N·(x - y)·grad, 3 per element
    ("mse-mean", lambda x: F.mse_loss(x, torch.ones_like(x)), 2 * N + N + 1, 3 * N),
    ("mse-sum", lambda x: F.mse_loss(x, torch.ones_like(x), reduction="sum"), 3 * N, 3 * N),
    ("mse-none", lambda x: F.mse_loss(x, torch.ones_like(x), reduction="none"), 2 * N, 3 * N),
    # subtract, abs, compare, the larger branch (2); backward subtract, 2 compares, 2 products
    ("huber", lambda x: F.huber_loss(x, torch.ones_like(x), delta=0.5), 5 * N + N + 1, 5 * N),
    # the quadratic branch 0.5·z·z/β is 3; its backward a divide by β more
    (
        "smooth-l1",
        lambda x: F.smooth_l1_loss(x, torch.ones_like(x), reduction="sum", beta=0.5),
        6 * N + N,
        6 * N,
    ),
    # a sigmoid to get probabilities (and its backward, N); the loss 9 per element, the
    # mean's N + 1; backward grad·(x - y)/max((1 - x)·x, ε) 6 and the mean's divide
    (
        "bce",
        lambda x: F.binary_cross_entropy(torch.sigmoid(x), _half(x)),
        N + 9 * N + N + 1,
        N + 6 * N + N,
    ),
    (
        "bce-weight",
        lambda x: F.binary_cross_entropy(torch.sigmoid(x), _half(x), weight=_half(x)),
        N + 10 * N + N + 1,
        N + 7 * N + N,
    ),
    # (1 - y)·x - log_sigmoid(x): 4; the backward torch composes: sigmoid, subtract, times
    # the gradient, the mean's divide
    (
        "bce-logits",
        lambda x: F.binary_cross_entropy_with_logits(x, _half(x)),
        4 * N + N + 1,
        4 * N,
    ),
    # pos_weight (b values): (p - 1) per value, then ·y, +1 and the product, 3 per element;
    # backward p·y, +1, -y, sigmoid, the product, -p·y, ·grad, /N
    (
        "bce-logits-pos-weight",
        lambda x: F.binary_cross_entropy_with_logits(
            x, _half(x), pos_weight=torch.full_like(x[0], 2.0)
        ),
        4 * N + 3 * N + 3 + N + 1,
        8 * N,
    ),
    # soft margin log1p(exp(-x·y)): a negate, a multiply, an exp, a log1p (4), the mean's N
    # adds and divide; backward -norm·y·z/(1 + z)·grad, z = exp(-y·x): negate, multiply,
    # exp, the multiplies by y and -norm, an add, a divide, the gradient's multiply (8),
    # the scale by -norm taken for a sum and none too
    (
        "soft-margin-mean",
        lambda x: F.soft_margin_loss(x, torch.ones_like(x)),
        4 * N + N + 1,
        8 * N,
    ),
    (
        "soft-margin-sum",
        lambda x: F.soft_margin_loss(x, _half(x), reduction="sum"),
        4 * N + N,
        8 * N,
    ),
    (
        "soft-margin-none",
        lambda x: F.soft_margin_loss(x, _half(x), reduction="none"),
        4 * N,
        8 * N,
    ),
    # multi-class margin (5 samples, 3 classes, target 0): per other class margin - x[y] + x[i]
    # (2), a compare, the branch's add (1; p = 2 its square, weight its multiply, 1 each);
    # per sample a divide by the classes; the mean's 5 adds and divide. Backward z for every
    # value (2), per other class a compare and the subtraction (2; p = 2 2·g·z, 2; weight 1),
    # each value times the output's gradient (1). The branch runs where z > 0: a margin of
    # 1e6 meets every one, as a dry run takes them (tests/cost/test_skipped_by_value.py)
    (
        "multi-margin",
        lambda x: F.multi_margin_loss(x, _first(x), margin=1e6),
        10 * 4 + 5 + 6,
        45 + 10 * 2,
    ),
    (
        "multi-margin-p2-weight",
        lambda x: F.multi_margin_loss(
            x, _first(x), p=2, margin=1e6, weight=torch.ones_like(x[0]), reduction="sum"
        ),
        10 * 6 + 5 + 5,
        45 + 10 * 5,
    ),
    # negative log-likelihood, 5 targets of 3 classes: a value picked per target (a divide
    # for the mean); with a weight a multiply per target and, for a sum or mean, an add of
    # the total weight. Backward: the gradient put at each target (negated, times the
    # weight), not the 15 values of the zeros around them
    ("nll-mean", lambda x: F.nll_loss(x, _first(x)), 5 + 1, 5),
    ("nll-weight-mean", lambda x: F.nll_loss(x, _first(x), weight=_ones(x)), 3 * 5 + 1, 2 * 5),
    (
        "nll-weight-sum",
        lambda x: F.nll_loss(x, _first(x), weight=_ones(x), reduction="sum"),
        3 * 5,
        2 * 5,
    ),
    (
        "nll-weight-none",
        lambda x: F.nll_loss(x, _first(x), weight=_ones(x), reduction="none"),
        2 * 5,
        2 * 5,
    ),
    # an image's: 3 classes at 5 x 1 positions (nll_loss2d), backward as the 1-d kernel's
    ("nll-2d", lambda x: F.nll_loss(_image(x), _first(x).view(1, 5, 1)), 5 + 1, 5),
    # log-softmax 5 per element (its backward 4) and the loss
    ("cross-entropy", lambda x: F.cross_entropy(x, _first(x)), 5 * N + 5 + 1, 4 * N + 5),
    # KL divergence is composed by torch: xlogy, a product, a subtract, the sum, one divide;
    # backward the divide's (1), the subtract's negation and the product's, N each
    ("kl-div", lambda x: F.kl_div(x, _half(x), reduction="batchmean"), 4 * N + 1, 2 * N + 1),
]


@pytest.mark.parametrize(
    ("body", "forward", "backward"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_loss_is_counted_alike_on_a_cpu_and_on_meta(
    body: Any, forward: int, backward: int
) -> None:
    expected = Counts(forward, backward, ())
    assert on_cpu(body, [AB], SIZES) == expected
    assert on_meta(body, [AB], SIZES) == expected


def test_a_margin_loss_backward_that_ran_is_the_one_predicted() -> None:
    # the CPU's backward kernel run inside the record counts what the prediction counts
    # (every margin met, as the prediction takes them)
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    with record() as rec:
        F.multi_margin_loss(x, _first(x), margin=1e6).backward()
    assert (rec.total.flops, rec.total.backward_flops, rec.total.uncounted) == (51, 65, ())


def test_a_soft_margin_backward_that_ran_is_the_one_predicted() -> None:
    # 76 forward and 120 backward (above)
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    with record() as rec:
        F.soft_margin_loss(x, torch.ones_like(x)).backward()
    assert (rec.total.flops, rec.total.backward_flops, rec.total.uncounted) == (76, 120, ())


def test_a_multilabel_margin_loss_is_counted_from_its_values_and_not_estimated() -> None:
    # 3 x 4 zeros, every target 0 (four times: one label): per row the label against the 3
    # other classes, 4 times, 12 pairs; each pair 1 - x[0] + x[d] and its compare (3), its
    # margin 1 > 0 added (1); the rows summed (3), divided by 4 and by 3 (2): 149. Backward:
    # the pairs again (3) and their two updates (2), the scale (1), 12 values times the
    # output's gradient: 193. Its work is set by values: estimate() stops there
    x = torch.zeros(3, 4, requires_grad=True)
    with record() as rec:
        F.multilabel_margin_loss(x, torch.zeros(3, 4, dtype=torch.long)).backward()
    assert (rec.total.flops, rec.total.backward_flops) == (3 * 36 + 36 + 5, 5 * 36 + 1 + 12)

    def body(x: Tensor) -> Tensor:
        return F.multilabel_margin_loss(x, torch.zeros(x.shape, dtype=torch.long))

    with pytest.raises(DryRunError, match="multilabel_margin_loss"):
        on_meta(body, [AB], SIZES)


def test_a_gated_linear_unit_is_a_sigmoid_and_a_product_per_output() -> None:
    # 5 x 6 in, 5 x 3 out (M = 15): a sigmoid and a product per output; backward the sigmoid
    # again, 1 - s, grad·s, grad·a·s·(1 - s): 6 per gradient value
    sizes = {"a": 5, "b": 6}
    expected = Counts(2 * 15, 6 * 15, ())
    assert on_cpu(F.glu, [AB], sizes) == expected
    assert on_meta(lambda x: F.glu(x), [AB], sizes) == expected


def test_a_loss_formula_is_in_the_dims() -> None:
    cost = typedflops.estimate(
        lambda x: F.huber_loss(x, torch.ones_like(x)), AB, grad=("x",), a=5, b=3
    )
    assert str(cost.formula) == "6*a*b + 1"
    assert str(cost.backward_formula) == "5*a*b"
    assert cost.exact


def test_flop_counter_mode_counts_the_fused_losses_as_zero() -> None:
    # where typedflops departs: FlopCounterMode has no formula for these kernels
    x = torch.randn(5, 3, requires_grad=True)
    assert flop_counter_total(lambda: F.mse_loss(x, torch.ones_like(x))) == 0
    assert flop_counter_total(lambda: F.binary_cross_entropy(torch.sigmoid(x), _half(x))) == 0
    assert flop_counter_total(lambda: F.soft_margin_loss(x, torch.ones_like(x))) == 0
