"""Kernels that skip entries by value count what ran in a record of a real run: ``nll_loss``
(``nll_loss2d``, ``cross_entropy``) passes over targets equal to ``ignore_index``,
``embedding``'s backward and ``embedding_bag``'s kernels over ids equal to ``padding_idx``
(``NLLLoss.cpp``, ``Embedding.cpp``, ``EmbeddingBag.cpp``). FlopCounterMode has no formula
for them (it counts them 0): the counts are written out by hand below. Without values (a
dry run) every entry is counted, and the Cost says so in ``assumed``."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float, Int
from torch import Tensor, nn

from typedflops import record, typed_flops
from typedflops.cost.engine.opkeys import plan_of
from typedflops.cost.engine.skipped_work import SKIPS

IGNORE = -100
# 6 targets of 4 classes, two of them ignored: 4 kept
TARGETS = [0, 1, IGNORE, 3, IGNORE, 2]
NONE_IGNORED = [0, 1, 1, 3, 0, 2]


def _nll(targets: list[int], reduction: str, weighted: bool) -> tuple[int, int]:
    """Forward and backward FLOPs a record gives of ``F.nll_loss`` on (6, 4) inputs."""
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(4, dtype=torch.float64) if weighted else None
    t = torch.tensor(targets)
    with record() as rec:
        out = F.nll_loss(x, t, weight=weight, reduction=reduction)
        out.backward(torch.ones_like(out))
    return rec.total.flops, rec.total.backward_flops


def test_nll_loss_counts_the_targets_not_ignored_forward_and_backward() -> None:
    # Per target not ignored, the kernel picks -x[i, t] (1); with a weight it multiplies by
    # weight[t] (1) and, reduced, adds weight[t] into the total weight (1); a mean divides
    # once more. Backward puts -grad (times weight[t]) at each such target: 1 (2 weighted).
    for reduction, weighted, per_target, tail in [
        ("none", False, 1, 0),
        ("sum", False, 1, 0),
        ("mean", False, 1, 1),
        ("none", True, 2, 0),
        ("sum", True, 3, 0),
        ("mean", True, 3, 1),
    ]:
        backward_per_target = 1 + weighted
        for targets, kept in [(TARGETS, 4), (NONE_IGNORED, 6)]:
            assert _nll(targets, reduction, weighted) == (
                per_target * kept + tail,
                backward_per_target * kept,
            ), (reduction, weighted, targets)


def test_spatial_cross_entropy_counts_the_pixels_not_ignored() -> None:
    # (2, 3, 2, 2) logits, (2, 2, 2) targets with 3 of 8 ignored: log-softmax 5 per value
    # (120) and a pick per kept target (5); backward a value per kept target (5) and the
    # log-softmax's 4 per value (96). None ignored: 8 targets.
    x = torch.randn(2, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    for targets, kept in [
        ([[[0, 1], [IGNORE, 2]], [[IGNORE, IGNORE], [1, 1]]], 5),
        ([[[0, 1], [0, 2]], [[2, 2], [1, 1]]], 8),
    ]:
        with record() as rec:
            F.cross_entropy(x, torch.tensor(targets), reduction="sum").backward()
        assert (rec.total.flops, rec.total.backward_flops) == (120 + kept, kept + 96)


def test_label_smoothing_differs_by_the_ignored_targets_alone() -> None:
    # With label smoothing, cross-entropy adds a smoothing term computed for every target
    # (its ignored ones masked to 0 afterwards: the same work whatever the values); the
    # picking (nll_loss) skips the ignored ones, forward and backward: 2 ignored, 2 fewer.
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    counts = []
    for targets in (TARGETS, NONE_IGNORED):
        with record() as rec:
            F.cross_entropy(
                x, torch.tensor(targets), reduction="sum", label_smoothing=0.1
            ).backward()
        counts.append((rec.total.flops, rec.total.backward_flops))
    (forward, backward), (forward_all, backward_all) = counts
    assert (forward_all - forward, backward_all - backward) == (2, 2)


def test_embedding_backward_adds_the_rows_of_ids_other_than_padding() -> None:
    # ids [[0, 1, 2], [3, 0, 0]], rows of 4: with padding_idx=0 the kernel adds the gradient
    # rows of ids 1, 2, 3 alone (3 x 4 = 12 adds); without, all six (24)
    w = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([[0, 1, 2], [3, 0, 0]])
    grad = torch.ones(2, 3, 4, dtype=torch.float64)
    for padding_idx, adds in [(0, 12), (None, 24), (4, 24)]:
        with record() as rec:
            F.embedding(ids, w, padding_idx=padding_idx).backward(grad)
        assert (rec.total.flops, rec.total.backward_flops) == (0, adds), padding_idx


def test_embedding_bag_counts_the_ids_other_than_padding() -> None:
    # ids [0, 1, 2, 0, 3, 0] in bags [0, 1], [], [2, 0], [3, 0] (offsets [0, 2, 2, 4], the
    # second empty), rows of 4, padding_idx=0: the kernels pass over the three 0s, 3 ids
    # kept, 12 values. sum: an add per value (12), backward the same (12); mean: a divide
    # more per output value (4 bags x 4), backward an add and a divide per value (24); max:
    # a compare per value (12), backward passes each on (0); per_sample_weights (sum): a
    # multiply more per value (24), backward 24 and the weights' gradient, a multiply and
    # an add per value (24). include_last_offset with offsets [0, 2, 2, 4, 6]: the same
    # bags. Without padding, 6 ids: 24 values.
    w = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([0, 1, 2, 0, 3, 0])
    psw = torch.rand(6, dtype=torch.float64, requires_grad=True)
    grad = torch.ones(4, 4, dtype=torch.float64)
    bags: list[dict[str, Any]] = [
        {"offsets": torch.tensor([0, 2, 2, 4])},
        {"offsets": torch.tensor([0, 2, 2, 4, 6]), "include_last_offset": True},
    ]
    paddings: list[tuple[int, dict[str, Any]]] = [(3, {"padding_idx": 0}), (6, {})]
    for kept, padding in paddings:
        values = 4 * kept
        cases: list[tuple[dict[str, Any], int, int]] = [
            ({"mode": "sum"}, values, values),
            ({"mode": "mean"}, values + 16, 2 * values),
            ({"mode": "max"}, values, 0),
            ({"mode": "sum", "per_sample_weights": psw}, 2 * values, 2 * values + 2 * values),
        ]
        for options, forward, backward in cases:
            for ends in bags:
                with record() as rec:
                    F.embedding_bag(ids, w, **ends, **options, **padding).backward(grad)
                got = (rec.total.flops, rec.total.backward_flops)
                assert got == (forward, backward), (options["mode"], kept, list(ends))


@typed_flops
def _loss(x: Float[Tensor, "n c"], t: Int[Tensor, " n"]) -> Float[Tensor, ""]:
    return F.nll_loss(x, t)


def test_calls_alike_in_shape_are_each_counted_by_their_values() -> None:
    # A mean: a pick per kept target and a divide; backward a value per kept target.
    # Targets kept: 4, then 3, then 6: forward 5 + 4 + 7, backward 4 + 3 + 6
    x = torch.randn(6, 4, requires_grad=True)
    with record() as rec:
        for targets in (TARGETS, [IGNORE, IGNORE, 2, 3, IGNORE, 1], NONE_IGNORED):
            _loss(x, torch.tensor(targets)).backward()
    assert (rec.total.flops, rec.total.backward_flops) == (16, 13)
    assert rec.total.assumed == ()
    # calls that keep as many targets share a row; those that keep others have their own.
    # A row's backward is foreseen from shapes (every target: 6) and says so; the total's
    # is what ran (4 + 4 + 6 + 6)
    with record() as rec:
        for targets in (TARGETS, [IGNORE, 1, 2, IGNORE, 0, 1], NONE_IGNORED, NONE_IGNORED):
            _loss(x, torch.tensor(targets)).backward()
    note = ["nll_loss backward: every target counted, as if none equals ignore_index"]
    rows = [(r["calls"], r["flops"], r["backward_flops"], r["assumed"]) for r in rec.rows()]
    assert rows == [(2, 5, 6, note), (2, 7, 6, note)]
    assert (rec.total.flops, rec.total.backward_flops, rec.total.assumed) == (24, 20, ())
    embedding = nn.Embedding(5, 4, padding_idx=0)
    with record() as rec:
        for ids in ([[0, 1, 2], [3, 0, 0]], [[1, 1, 2], [3, 4, 0]], [[0, 0, 0], [0, 0, 0]]):
            embedding(torch.tensor(ids)).backward(torch.ones(2, 3, 4))
    assert rec.total.backward_flops == (3 + 5 + 0) * 4


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 8),
    st.integers(2, 5),
    st.data(),
)
def test_a_record_counts_the_targets_and_ids_the_values_keep(
    n: int, c: int, data: st.DataObject
) -> None:
    labels = data.draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n))
    ignored = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    targets = [IGNORE if skip else label for label, skip in zip(labels, ignored, strict=True)]
    kept = n - sum(ignored)
    x = torch.randn(n, c, requires_grad=True)
    with record() as rec:
        F.nll_loss(x, torch.tensor(targets), reduction="sum").backward()
    assert (rec.total.flops, rec.total.backward_flops) == (kept, kept)
    padding = data.draw(st.integers(0, c - 1))
    w = torch.randn(c, 3, requires_grad=True)
    ids = torch.tensor(labels)
    with record() as rec:
        F.embedding(ids, w, padding_idx=padding).backward(torch.ones(n, 3))
    assert rec.total.backward_flops == 3 * sum(1 for i in labels if i != padding)


class _Model(nn.Module):
    def __init__(self, padding_idx: int | None) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8, padding_idx=padding_idx)
        self.head = nn.Linear(8, 16)

    @typed_flops
    def forward(self, ids: Int[Tensor, "b s"], targets: Int[Tensor, "b s"]) -> Float[Tensor, ""]:
        logits = self.head(self.embed(ids)).flatten(0, 1)
        return F.cross_entropy(logits, targets.flatten())


def test_an_estimate_counts_every_entry_and_says_so() -> None:
    # b*s targets of 16 classes: log-softmax 5 per logit (80 a target), a pick per target
    # and the mean's divide: 81*b*s + 1 with the head's 2*8*16 a token: 337*b*s + 1, every
    # target counted; the formula stays exact, the Cost names what it took as given
    cost = _Model.forward.estimate(_Model(0), b=2, s=4)
    assert str(cost.formula) == "337*b*s + 1" and cost.exact
    assert cost.assumed == (
        "embedding backward: every id counted, as if none equals padding_idx",
        "nll_loss: every target counted, as if none equals ignore_index",
        "nll_loss backward: every target counted, as if none equals ignore_index",
    )
    assert "values not known: nll_loss: every target counted" in str(cost)
    assert cost.to_dict()["assumed"] == list(cost.assumed)
    # No padding_idx: an embedding skips no id, and nothing is taken as given of its ids
    plain = _Model.forward.estimate(_Model(None), b=2, s=4)
    assert not any(note.startswith("embedding") for note in plain.assumed)
    # A real run records what ran: 2 targets of 8 ignored, 6 picked (and the mean's divide)
    ids = torch.tensor([[1, 2, 0, 3], [4, 0, 5, 6]])
    targets = torch.tensor([[1, 2, IGNORE, 3], [4, IGNORE, 5, 6]])
    with record() as rec:
        _Model(0)(ids, targets).backward()
    assert rec.total.flops == 336 * 8 + 6 + 1 and rec.total.assumed == ()


def test_a_foreseen_backward_says_what_it_took_as_given_until_it_runs() -> None:
    # Forward: 4 targets kept and the mean's divide (5). Its backward, foreseen from shapes,
    # counts the 6 targets and says so; run, it counts the 4 that ran and says nothing.
    x = torch.randn(6, 4, requires_grad=True)
    with record() as rec:
        F.nll_loss(x, torch.tensor(TARGETS))
    assert (rec.total.flops, rec.total.backward_flops) == (5, 6)
    assert rec.total.assumed == (
        "nll_loss backward: every target counted, as if none equals ignore_index",
    )
    with record() as rec:
        F.nll_loss(x, torch.tensor(TARGETS)).backward()
    assert (rec.total.flops, rec.total.backward_flops, rec.total.assumed) == (5, 4, ())


def _margins_met(x: list[list[float]], targets: list[int], margin: float) -> int:
    """The (sample, class other than its target) pairs with ``margin - x[y] + x[i] > 0``,
    by ``LossMultiMargin.cpp``'s loop."""
    met = 0
    for row, y in zip(x, targets, strict=True):
        for i, value in enumerate(row):
            if i != y and margin - row[y] + value > 0:
                met += 1
    return met


def test_multi_margin_loss_counts_the_margins_met() -> None:
    # 3 samples of 4 classes, 9 pairs. Row 0 (target 0, x[y] = 0): z = 3, 1.5, -2, met 2;
    # row 1 (all 1): z = 1 three times, met 3; row 2 (x[y] = 5): none. Per pair z and a
    # compare (3); per pair met an add (p=2: the square, 1 more; weight: 1 more). Each
    # sample divided by C (3), the mean's sum and divide (4). Backward: z per value and each
    # value times the output's gradient (3 x 12), a compare per pair (9), per pair met the
    # target's subtract (p=2: 2*g*z, 2 more; weight 1 more).
    rows = [[0.0, 2.0, 0.5, -3.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 5.0, 0.2]]
    targets = [0, 1, 2]
    met = _margins_met(rows, targets, 1.0)
    assert met == 5
    x = torch.tensor(rows, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(4, dtype=torch.float64)
    for p, weighted in [(1, False), (2, False), (2, True)]:
        with record() as rec:
            F.multi_margin_loss(
                x, torch.tensor(targets), p=p, weight=weight if weighted else None
            ).backward()
        forward = 3 * 9 + (1 + (p == 2) + weighted) * met + 3 + 4
        backward = 3 * 12 + 9 + (1 + 2 * (p == 2) + weighted) * met
        assert (rec.total.flops, rec.total.backward_flops) == (forward, backward), (p, weighted)
    # Every margin met (x all 0, margin 1): the count of shapes alone, 9 pairs
    with record() as rec:
        F.multi_margin_loss(torch.zeros(3, 4), torch.tensor(targets))
    assert rec.total.flops == 3 * 9 + 9 + 3 + 4


def test_histc_bins_the_elements_in_its_range_alone() -> None:
    # min 0, max 4: every element's first compare (x >= 0: 6), the second for those at
    # least 0 (0.5, 2, 9, 4: 4), the bin's subtract, multiply, divide and the add for those
    # in range (0.5, 2, 4: 3 x 4); -3 and NaN stop at the first. Its own range (min == max):
    # the extrema and 6 per element, every element inside.
    x = torch.tensor([0.5, 2.0, 9.0, -3.0, float("nan"), 4.0])
    with record() as rec:
        torch.histc(x, bins=4, min=0, max=4)
        torch.histc(x, bins=4, min=0, max=10)  # (all but -3 and NaN: 6 + 4 + 4 x 4)
        torch.histc(x[:4], bins=4)
    assert rec.total.flops == (6 + 4 + 12) + (6 + 4 + 16) + 7 * 4


def test_a_kernel_its_values_decide_is_never_found_by_its_shapes_alone() -> None:
    # Every overload of every such op is keyed with what its values make it run: none takes
    # the paths keyed by tensors' shapes (tensor_key, the tensors' guards).
    for packet in SKIPS:
        for name in packet.overloads():
            plan = plan_of(getattr(packet, name))
            assert plan.valued is not None, (packet, name)
            assert (plan.tensors, plan.quick) == (False, -1), (packet, name)
