"""Gradient sums where tensors are written in place through views: slice assignment
(``h[:, 0] = h[:, 1]``), ``+=`` on a slice, a cache filled slice by slice, and
``F.pad(..., mode="circular")``, which copies slices of its output into itself.

Autograd gives a view's base a new node (``CopySlices``) at each write through a view, with
one edge to the base's old node, and makes a view read after its base was written a new
node (``AsStridedBackward``) with one edge to the base as it is then. The oracle is the
backward that runs inside ``record()``; ``estimate()`` and a record's prediction (a forward
alone) must agree with it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import estimate, record, typed_flops

B, C, H, W = 2, 3, 6, 6


def _ran_and_predicted(function: Callable[[Tensor], Tensor], x: Tensor) -> tuple[int, int]:
    """The backward FLOPs that ran for ``function(x).sum()``, and a record's prediction."""
    with record() as ran:
        function(x.clone().requires_grad_()).sum().backward()
    with record() as predicted:
        function(x.clone().requires_grad_())
    return ran.total.backward_flops, predicted.total.backward_flops


def _circular(x: Tensor) -> Tensor:
    return F.pad(x, (1, 1, 1, 1), mode="circular")


def test_circular_padding_sums_the_gradients_of_its_four_self_copies() -> None:
    # the padded tensor is read by four copies of its own slices into itself (rows, then
    # columns): each adds an edge to it as it was before, four sums of its size
    x = torch.randn(B, C, H, W)
    padded = B * C * (H + 2) * (W + 2)
    assert _ran_and_predicted(_circular, x) == (4 * padded, 4 * padded)
    cost = estimate(_circular, Float[Tensor, "b c h w"], b=B, c=C, h=H, w=W, grad=("x",))
    assert cost.backward_flops == 4 * padded
    conv = nn.Conv2d(C, 4, 3, padding=1, padding_mode="circular")
    ran, predicted = _ran_and_predicted(conv, x)
    assert ran == predicted
    grad = ("input",)
    assert estimate(conv, Float[Tensor, "b 3 h w"], b=B, h=H, w=W, grad=grad).backward_flops == ran


def _assign_columns(x: Tensor) -> Tensor:
    h = x * 2.0
    h[:, 0] = h[:, 1]
    h[:, 2] = h[:, 3]
    return h


def _add_to_a_column(x: Tensor) -> Tensor:
    h = x * 2.0
    h[:, 0] += h[:, 1]
    return h * h


def _cache(x: Tensor, y: Tensor) -> Tensor:
    cache = torch.zeros(2 * x.shape[0], x.shape[1])
    cache[: x.shape[0]] = x
    cache[x.shape[0] :] = y
    return cache * cache


def test_slice_assignments_sum_what_autograd_sums() -> None:
    x = torch.randn(4, 6)
    n = x.numel()
    # x * 2's product, and per assignment one sum of h (the slice read, CopySlices' edge)
    assert _ran_and_predicted(_assign_columns, x) == (3 * n, 3 * n)
    # x * 2's; h * h's two products and its sum; a sum of h before the `+=` (its two
    # slices read) and one after it (the column read again, CopySlices' edge)
    assert _ran_and_predicted(_add_to_a_column, x) == (6 * n, 6 * n)
    cost = estimate(_add_to_a_column, Float[Tensor, "b d"], b=4, d=6, grad=("x",))
    assert cost.backward_flops == 6 * n
    # a cache of zeros filled from two inputs: no sum until it is read twice
    x, y = torch.randn(4, 6, requires_grad=True), torch.randn(4, 6, requires_grad=True)
    with record() as ran:
        _cache(x, y).sum().backward()
    assert ran.total.backward_flops == 3 * 2 * n  # two products and a sum of the cache
    spec = Float[Tensor, "b d"]
    cached = estimate(_cache, spec, spec, b=4, d=6, grad=("x", "y"))
    assert cached.backward_flops == ran.total.backward_flops


_CUTS = (slice(0, 2), slice(1, 3), slice(2, 4), slice(None))
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["view", "mul_", "add_", "copy", "zero_", "read"]),
        st.integers(0, 7),
        st.integers(0, 7),
    ),
    min_size=1,
    max_size=7,
)


def _run(x: Tensor, steps: list[tuple[str, int, int]]) -> Tensor:
    """Views of ``x * 1`` made, written in place and read as ``steps`` say; every tensor
    made is summed into the result (so each reaches the backward that runs)."""
    h = x * 1.0
    views, reads = [h], []
    for kind, which, cut in steps:
        view = views[which % len(views)]
        if kind == "view":
            part = _CUTS[cut % 4]
            views.append(view[part] if cut < 4 else view[:, part])
        elif kind == "mul_":
            view.mul_(2.0)
        elif kind == "add_":
            view.add_(view * 1.0)
        elif kind == "copy":
            h[0:2, 0:2] = h[2:4, 2:4]
        elif kind == "zero_":
            view.zero_()
        else:
            reads.append(view * 3.0)
    total = h.sum()
    for tensor in (*reads, *views):
        total = total + tensor.sum()
    return total


@settings(max_examples=60, deadline=None, derandomize=True)
@given(steps=_STEPS, own=st.booleans())
def test_writes_through_views_predict_the_sums_that_run(
    steps: list[tuple[str, int, int]], own: bool
) -> None:
    """In a decorated call and in a record's own code alike."""

    @typed_flops
    def program(x: Float[Tensor, "4 4"]) -> Float[Tensor, ""]:
        return _run(x, steps)

    function = (lambda x: _run(x, steps)) if own else program
    ran, predicted = _ran_and_predicted(function, torch.randn(4, 4))
    assert predicted == ran


def _view_of_a_view_read_by_a_view(x: Float[Tensor, "4 4"]) -> Float[Tensor, ""]:
    h = x * 1.0
    v0 = h[:, 1:3]
    v1 = h[2:4]
    v2 = v0[1:3]  # (v0 read only by this slice, and v2 by nothing before h is written)
    h.mul_(2.0)
    return (h * 3.0).sum() + h.sum() + v0.sum() + v1.sum() + v2.sum()


def _view_of_a_view_written(x: Float[Tensor, "4 4"]) -> Float[Tensor, ""]:
    h = x * 1.0
    v0 = h[:, 2:4]
    a = v0 * 3.0
    v2 = v0[:, 1:3]
    v2.mul_(2.0)  # (through a view of a view no op read: CopySlices' edge goes to h)
    v4 = v2[2:4]
    return a.sum() + (v4 * 3.0).sum() + h.sum() + v0.sum() + v2.sum() + v4.sum()


@pytest.mark.parametrize("own", [True, False])
def test_a_view_of_a_view_replaced_before_it_is_read_reaches_nothing(own: bool) -> None:
    x = torch.randn(4, 4)
    n = x.numel()
    # the products of x * 1, h.mul_ and h * 3 (n each), and four sums of h as written: its
    # five readers (h * 3, h.sum and the three views read again, each a new node with an
    # edge to it); no sum of h as first made, whose slices reach nothing: v1 and v2 were
    # not read before the write, v0 only by v2's slice (128 predicted, 112 ran, in a
    # record's own code)
    first = _view_of_a_view_read_by_a_view if own else typed_flops(_view_of_a_view_read_by_a_view)
    assert _ran_and_predicted(first, x) == (3 * n + 4 * n,) * 2
    # x * 1 (16), v0 * 3 (8), v2.mul_ (4), v4 * 3 (2); sums: h as first made, read by v0's
    # slice and by CopySlices (16); h as written, read by h.sum and v0 and v2 made again
    # (2 * 16); v2 made again, read by v4's slice and v2.sum (4); v4, read twice (2).
    # v0's slice has one reader: v2's slice was replaced (76 predicted, 84 ran)
    second = _view_of_a_view_written if own else typed_flops(_view_of_a_view_written)
    assert _ran_and_predicted(second, x) == (16 + 8 + 4 + 2 + 16 + 32 + 4 + 2,) * 2


@typed_flops
def _exp_times(x: Float[Tensor, "..."]) -> Float[Tensor, "..."]:
    return torch.exp(x) * x


def _stale_view_into_a_call(x: Float[Tensor, "4 4"]) -> Float[Tensor, ""]:
    h = x * 1.0
    t0 = h.unsqueeze(0)
    h.mul_(2.0)  # (t0, held where the call below begins, is a node made again when read)
    return _exp_times(t0).sum() + h.view(-1).sum()


def _expanded_view_made_again(x: Float[Tensor, "4 4"]) -> Float[Tensor, ""]:
    h = x * 1.0
    t0 = h.unsqueeze(0).expand(2, 4, 4)
    h.mul_(2.0)
    h.mul_(2.0)
    return h.sum() + t0.sum()


@pytest.mark.parametrize("own", [True, False])
def test_a_view_made_again_is_a_new_node_with_its_own_backward(own: bool) -> None:
    x = torch.randn(4, 4)
    n = x.numel()
    # x * 1 and h.mul_ (n each); in the call, exp (n) and its product with t0 (2n); t0
    # made again, read by exp and by the product (a sum of n); h as written, read by t0
    # made again and by its view (a sum of n). t0's unsqueeze, held where the call began,
    # reaches nothing: no sum of h as first made (128 predicted, 112 ran)
    first = _stale_view_into_a_call if own else typed_flops(_stale_view_into_a_call)
    assert _ran_and_predicted(first, x) == (7 * n,) * 2
    # x * 1 and the two h.mul_ (n each), a sum of h as last written (its sum and t0 made
    # again), and t0 made again: torch's as_strided_backward sums its gradient over the
    # expanded dim, 2n (64 predicted, 96 ran)
    second = _expanded_view_made_again if own else typed_flops(_expanded_view_made_again)
    assert _ran_and_predicted(second, x) == (3 * n + n + 2 * n,) * 2
