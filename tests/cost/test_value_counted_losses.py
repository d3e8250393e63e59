"""CTC loss and the multi-label margin loss, whose work depends on values: a record of a
real run counts what torch's CPU kernels compute, forward and backward, checked against
the kernels' loops written out here in Python, which count their operations as they go
and compute the same values as torch; ``estimate()`` stops at them with one line."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from typedflops import estimate, record, typed_flops
from typedflops.errors import DryRunError

NEG = -math.inf


def _logsumexp(values: list[float]) -> tuple[float, int]:
    """``log(sum(exp(v - m))) + m`` over the values (absent ones are -inf), as the kernel
    runs it with three (or two) terms: its subtracts, exps, adds, log and the add of m."""
    m = max(values)
    m = 0.0 if m == NEG else m
    total = sum(math.exp(v - m) if v != NEG else 0.0 for v in values)
    out = math.log(total) + m if total > 0 else NEG
    n = len(values)
    return out, n + n + (n - 1) + 1 + 1


def _ctc_by_loops(
    lp: Tensor, labels: list[int], steps: int, grad: float
) -> tuple[float, list[list[float]], int, int]:
    """``LossCTC.cpp``'s CPU loops for one sequence (blank 0): its loss, its gradient
    (steps x classes) and the FLOPs of forward and backward, each comparison one."""
    p = lp.double().tolist()
    states = 2 * len(labels) + 1
    prime = [0 if s % 2 == 0 else labels[s // 2] for s in range(states)]
    alpha = [[NEG] * states for _ in range(steps)]
    alpha[0][0] = p[0][0]
    if labels:
        alpha[0][1] = p[0][prime[1]]
    forward = 0
    for t in range(1, steps):
        for s in range(states):
            terms = [alpha[t - 1][s]]
            forward += (s > 0) + (s > 1 and prime[s - 2] != prime[s])
            terms.append(alpha[t - 1][s - 1] if s > 0 else NEG)
            terms.append(alpha[t - 1][s - 2] if s > 1 and prime[s - 2] != prime[s] else NEG)
            value, flops = _logsumexp(terms)
            alpha[t][s] = value + p[t][prime[s]]
            forward += flops + 1
    if labels:
        ll, flops = _logsumexp([alpha[steps - 1][-1], alpha[steps - 1][-2]])
        nll = -ll
        forward += 1 + flops + 1  # (the max, the log-sum-exp of two, the negation)
    else:
        nll = -alpha[steps - 1][0]
        forward += 1
    beta = [[NEG] * states for _ in range(steps)]
    collected = [[NEG] * lp.shape[-1] for _ in range(steps)]
    last = steps - 1
    beta[last][-1] = p[last][0]
    collected[last][0] = alpha[last][-1] + beta[last][-1]
    backward = 1
    if labels:
        beta[last][-2] = p[last][prime[-2]]
        collected[last][prime[-2]] = alpha[last][-2] + beta[last][-2]
        backward += 1
    for t in range(steps - 2, -1, -1):
        for s in range(states - 1, -1, -1):
            far = s < states - 2 and prime[s + 2] != prime[s]
            backward += (s < states - 1) + far
            terms = [beta[t + 1][s], beta[t + 1][s + 1] if s < states - 1 else NEG]
            terms.append(beta[t + 1][s + 2] if far else NEG)
            value, flops = _logsumexp(terms)
            beta[t][s] = value + p[t][prime[s]]
            both = alpha[t][s] + beta[t][s]
            backward += flops + 1 + 1
            held = collected[t][prime[s]]
            if held == NEG:
                collected[t][prime[s]] = both
            else:
                collected[t][prime[s]], flops = _logsumexp([held, both])
                backward += 1 + flops
    gradient = [[0.0] * lp.shape[-1] for _ in range(steps)]
    for t in range(steps):
        for c in range(lp.shape[-1]):
            res = collected[t][c]
            gradient[t][c] = (math.exp(p[t][c]) - math.exp(res + nll - p[t][c])) * grad
            backward += 6
    return nll, gradient, forward, backward


@pytest.mark.parametrize(
    ("lengths", "labels"),
    [((6, 5), ([1, 1, 2], [3, 4])), ((4, 7), ([2], [1, 2, 2, 1])), ((5, 3), ([], [4, 3]))],
)
def test_ctc_loss_is_counted_as_its_kernels_loops_run(
    lengths: tuple[int, ...], labels: tuple[list[int], ...]
) -> None:
    torch.manual_seed(0)
    steps, batch, classes = max(lengths), len(lengths), 5
    log_probs = torch.randn(steps, batch, classes).log_softmax(2).detach().requires_grad_()
    longest = max(len(row) for row in labels)
    targets = torch.tensor([row + [1] * (longest - len(row)) for row in labels])
    inputs = torch.tensor(lengths)
    target_lengths = torch.tensor([len(row) for row in labels])
    grad = torch.rand(batch)
    with record() as rec:
        loss = F.ctc_loss(log_probs, targets, inputs, target_lengths, reduction="none")
        loss.backward(grad)
    forward = backward = 0
    for b, (length, row) in enumerate(zip(lengths, labels, strict=True)):
        nll, gradient, ran, ran_back = _ctc_by_loops(
            log_probs[:length, b], row, length, grad[b].item()
        )
        assert nll == pytest.approx(loss[b].item(), rel=1e-5)  # (the loops are torch's)
        assert log_probs.grad is not None
        torch.testing.assert_close(
            log_probs.grad[:length, b].double(),
            torch.tensor(gradient, dtype=torch.float64),
            rtol=1e-4,
            atol=1e-5,
        )
        forward, backward = forward + ran, backward + ran_back
    assert (rec.total.flops, rec.total.backward_flops) == (forward, backward)


@typed_flops
def ctc(
    log_probs: Float[Tensor, "t n c"],
    targets: Int[Tensor, "n s"],
    input_lengths: Int[Tensor, " n"],
    target_lengths: Int[Tensor, " n"],
) -> Float[Tensor, ""]:
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths)


def test_an_estimate_of_ctc_loss_names_the_op_and_the_way_out() -> None:
    with pytest.raises(DryRunError) as info:
        estimate(ctc, t=6, n=2, c=5, s=3)
    message = str(info.value)
    assert "\n" not in message
    assert "ctc_loss" in message and "lengths" in message and "record()" in message


def _multilabel_by_loops(x: Tensor, target: Tensor) -> tuple[float, list[list[float]], int, int]:
    """``LossMultiLabelMargin.cpp``'s CPU loops, mean reduction: the loss, the gradient of
    its mean, and the FLOPs of forward and backward (a comparison one)."""
    rows, dim = x.shape
    values, labels_rows = x.double().tolist(), target.tolist()
    total, forward, backward = 0.0, 0, 0
    g = 1.0 / (rows * dim)
    backward += 1
    gradient = [[0.0] * dim for _ in range(rows)]
    for row in range(rows):
        labels = []
        for label in labels_rows[row]:
            if label < 0:
                break
            labels.append(label)
        inner = 0.0
        for label in labels:
            for d in range(dim):
                if d not in labels:
                    z = 1 - values[row][label] + values[row][d]
                    forward += 3
                    backward += 3
                    if z > 0:
                        inner += z
                        forward += 1
                        gradient[row][label] -= g
                        gradient[row][d] += g
                        backward += 2
        total += inner
        forward += 1
    total = total / dim / rows
    forward += 2
    backward += rows * dim  # (each value times the output's gradient, 1 here)
    return total, gradient, forward, backward


def test_the_multilabel_margin_loss_is_counted_as_its_kernels_loops_run() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 5, requires_grad=True)
    target = torch.tensor([[3, 0, -1, 1, 1], [1, 2, 4, 0, 3], [2, -1, 0, 0, 0], [0, 0, -1, 2, 2]])
    with record() as rec:
        loss = F.multilabel_margin_loss(x, target)
        loss.backward()
    value, gradient, forward, backward = _multilabel_by_loops(x.detach(), target)
    assert loss.item() == pytest.approx(value, rel=1e-6)
    assert x.grad is not None
    torch.testing.assert_close(x.grad.double(), torch.tensor(gradient, dtype=torch.float64))
    assert (rec.total.flops, rec.total.backward_flops) == (forward, backward)


@typed_flops
def multilabel(x: Float[Tensor, "n d"], target: Int[Tensor, "n d"]) -> Float[Tensor, ""]:
    return F.multilabel_margin_loss(x, target)


def test_an_estimate_of_the_multilabel_margin_loss_names_the_op() -> None:
    with pytest.raises(DryRunError) as info:
        estimate(multilabel, n=4, d=5)
    assert "multilabel_margin_loss" in str(info.value) and "record()" in str(info.value)
