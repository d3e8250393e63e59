"""FLOPs of kernels whose work depends on values: CTC loss and the multi-label margin loss.

Counted from the real arguments (raw rules: each call on its own, see :mod:`.opkeys`), by
the loops of torch's CPU kernels (``LossCTC.cpp``, ``LossMultiLabelMargin.cpp``); a
comparison counts one FLOP, as a max does elsewhere. A dry run has no values and stops at
them with one line (see :data:`VALUE_COUNTED`).

CTC (log-probabilities (T, N, C), per sequence ``b`` an input length ``T_b`` and a target
of ``L`` labels, extended with blanks to ``S = 2L + 1`` states):

- forward, ``ctc_loss_cpu_template``: ``for t in 1..T_b-1: for s in 0..S-1:`` a log-sum-exp
  of up to three predecessors: 3 subtracts, 3 exps, 2 adds, a log, the max added back and
  the log-probability added (11), the max's comparisons (one for ``s > 0``, one where the
  state two back is taken: ``s > 1`` and its label differs, so the pairs of adjacent
  distinct labels); then the likelihood of the two last states (max, 2 subtracts, 2 exps,
  an add, a log, an add, a negation: 9; an empty target's: its negation, 1).
- backward, ``ctc_loss_backward_cpu_template``: the last step's two sums (1, or 2 with a
  target); ``for t in T_b-2..0: for s in S-1..0:`` the same log-sum-exp for beta (11 and its
  comparisons, mirrored), alpha + beta (1), and its log-add into the label's sum (max, 2
  subtracts, 2 exps, an add, a log, an add: 8) where that sum already holds a finite value
  (an earlier state of the label, at this step, reachable from the start and the end);
  then ``for t in 0..T_b-1: for c in 0..C-1:`` the gradient, ``(exp(lp) - exp(res + nll -
  lp)) * grad``: 6.

Multi-label margin (input (N, D), targets listing each row's labels until a -1):

- forward, ``multilabel_margin_loss_forward_inner_sum_cpu``: for each label ``j`` and each
  ``d`` not a label, ``z = 1 - x[j] + x[d]`` (2), ``z > 0`` (1), and ``sum += z`` where it
  is (1); then each row's sum divided by D (reduced: the rows summed, one divide, and one
  more for the mean; else a divide a row).
- backward: the same pairs' ``z`` (2) and comparison (1), and where ``z > 0`` the two
  updates ``grad[j] -= g``, ``grad[d] += g`` (2); the gradient scale ``g`` (1); then every
  value times the output's gradient (N·D).
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from .known_values import KnownValues

__all__ = ["VALUE_COUNTED", "unknown_values", "value_rules"]

aten = torch.ops.aten


def _lengths(value: Any) -> list[int]:
    return [int(v) for v in (value.tolist() if isinstance(value, torch.Tensor) else value)]


def _labels(targets: torch.Tensor, target_lengths: list[int]) -> list[list[int]]:
    """Each sequence's labels (targets (N, S_max) padded, or all concatenated)."""
    if targets.dim() == 2:
        rows = targets.tolist()
        return [row[:length] for row, length in zip(rows, target_lengths, strict=True)]
    flat = targets.tolist()
    found, at = [], 0
    for length in target_lengths:
        found.append(flat[at : at + length])
        at += length
    return found


def _distinct_pairs(labels: list[int]) -> int:
    return sum(1 for a, b in itertools.pairwise(labels) if a != b)


def _ctc(
    log_probs: torch.Tensor,
    targets: torch.Tensor,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    zero_infinity: bool = False,
) -> int:
    inputs, lengths = _lengths(input_lengths), _lengths(target_lengths)
    total = 0
    for steps, labels in zip(inputs, _labels(targets, lengths), strict=True):
        if steps == 0:
            continue
        states = 2 * len(labels) + 1
        row = 11 * states + (states - 1) + _distinct_pairs(labels)
        total += (steps - 1) * row + (9 if labels else 1)
    return total


def _reachable(labels: list[int], steps: int, blank: int, backward: bool) -> list[list[bool]]:
    """Per step, which extended states a path reaches from the start (or, ``backward``,
    reaches the end from): their log-alphas (log-betas) are finite."""
    states = 2 * len(labels) + 1
    prime = [blank if s % 2 == 0 else labels[s // 2] for s in range(states)]
    rows = [[False] * states for _ in range(steps)]
    first = steps - 1 if backward else 0
    ends = (states - 1, states - 2) if backward else (0, 1)
    for s in ends:
        if 0 <= s < states:
            rows[first][s] = True
    order = range(steps - 2, -1, -1) if backward else range(1, steps)
    step = 1 if backward else -1  # (the row a step reads)
    for t in order:
        before = rows[t + step]
        for s in range(states):
            near, far = (s + 1, s + 2) if backward else (s - 1, s - 2)
            found = before[s] or (0 <= near < states and before[near])
            if 0 <= far < states and prime[far] != prime[s]:
                found = found or before[far]
            rows[t][s] = found
    return rows


def _ctc_backward(
    grad: torch.Tensor,
    log_probs: torch.Tensor,
    targets: torch.Tensor,
    input_lengths: Any,
    target_lengths: Any,
    neg_log_likelihood: torch.Tensor,
    log_alpha: torch.Tensor,
    blank: int,
    zero_infinity: bool = False,
) -> int:
    inputs, lengths = _lengths(input_lengths), _lengths(target_lengths)
    classes = log_probs.shape[-1]
    total = 0
    for steps, labels in zip(inputs, _labels(targets, lengths), strict=True):
        if steps == 0:
            continue
        states = 2 * len(labels) + 1
        prime = [blank if s % 2 == 0 else labels[s // 2] for s in range(states)]
        row = 12 * states + (states - 1) + _distinct_pairs(labels)
        total += (1 if not labels else 2) + (steps - 1) * row + 6 * steps * classes
        alpha = _reachable(labels, steps, blank, backward=False)
        beta = _reachable(labels, steps, blank, backward=True)
        for t in range(steps - 2, -1, -1):
            held: set[int] = set()  # (labels whose sum at this step is finite)
            for s in range(states - 1, -1, -1):
                if prime[s] in held:
                    total += 8
                elif alpha[t][s] and beta[t][s]:
                    held.add(prime[s])
    return total


def _pairs(x: torch.Tensor, target: torch.Tensor) -> tuple[int, int]:
    """The (label, non-label) pairs of every row, and how many have ``z > 0``."""
    rows_x = x.reshape(-1, x.shape[-1] if x.dim() else 1).detach().double()
    rows_t = target.reshape(rows_x.shape)
    pairs = positive = 0
    for values, labels_row in zip(rows_x, rows_t.tolist(), strict=True):
        labels = []
        for label in labels_row:
            if label < 0:
                break
            labels.append(label)
        chosen = torch.zeros(values.shape[0], dtype=torch.bool)
        chosen[labels] = True
        others = values[~chosen]
        for label in labels:
            z = 1 - values[label] + others
            pairs += others.numel()
            positive += int((z > 0).sum())
    return pairs, positive


def _multilabel(x: torch.Tensor, target: torch.Tensor, reduction: int) -> int:
    pairs, positive = _pairs(x, target)
    frames = x.shape[0] if x.dim() == 2 else 1
    reduced = reduction != 0 or target.dim() <= 1
    tail = frames + 1 + (reduction == 1) if reduced else frames
    return 3 * pairs + positive + tail


def _multilabel_backward(
    grad_output: torch.Tensor,
    x: torch.Tensor,
    target: torch.Tensor,
    reduction: int,
    is_target: torch.Tensor,
) -> int:
    pairs, positive = _pairs(x, target)
    return 3 * pairs + 2 * positive + 1 + x.numel()


_RULES = {
    aten._ctc_loss: _ctc,
    aten._ctc_loss_backward: _ctc_backward,
    aten.multilabel_margin_loss_forward: _multilabel,
    aten.multilabel_margin_loss_backward: _multilabel_backward,
}

#: The kernels counted by their values, which a dry run does not have (their overloads),
#: and the grouped product (see :mod:`.grouped_rules`).
VALUE_COUNTED = frozenset(
    {
        *(getattr(packet, name) for packet in _RULES for name in packet.overloads()),  # type: ignore[no-untyped-call]
        aten._grouped_mm.default,
    }
)


def unknown_values(
    func: Any, known: KnownValues | None, args: tuple[Any, ...], kwargs: Any
) -> bool:
    """Whether ``func``, one of :data:`VALUE_COUNTED`, is given a tensor without values (on
    meta, or fake) whose values no dry run knows (``known``): its work cannot be counted.
    A grouped product reads its groups (``offs``) alone."""
    if func is aten._grouped_mm.default:
        tensors = [args[2] if len(args) > 2 else kwargs.get("offs")]
    else:
        tensors = _leaves((args, kwargs))
    return any(
        isinstance(tensor, torch.Tensor)
        and _without_values(tensor)
        and (known is None or known.of(tensor) is None)
        for tensor in tensors
    )


def _without_values(tensor: torch.Tensor) -> bool:
    return tensor.layout is torch.strided and (tensor.is_meta or isinstance(tensor, FakeTensor))


def _leaves(tree: Any) -> list[Any]:
    return list(torch.utils._pytree.tree_leaves(tree))


def value_rules() -> dict[Any, Any]:
    """The raw rules of the kernels in :data:`VALUE_COUNTED`, by op."""
    return dict(_RULES)
