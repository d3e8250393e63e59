"""Counts of what the kernels compute, held against hand counts, where FlopCounterMode's own
formula counts other work (grouped convolution backward) or counts nothing (a
``torch.autograd.Function``'s backward that is never run), and the rules' edges: views cost 0
and are never uncounted, ``flops=`` signs. Norms and pooling: ``test_norm_pool_counts.py``.

The "Where typedflops and FlopCounterMode differ" table of docs/costs.md quotes these hand counts.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import SpecError, record, typed_flops
from typedflops.cost.engine import rules
from typedflops.cost.engine.recorder import torch_counts
from typedflops.cost.engine.rules import FREE, RuleEntry, find_rule

aten = torch.ops.aten


def _recorded(body: Any) -> tuple[int, int, tuple[str, ...]]:
    with record() as rec:
        body()
    return rec.total.flops, rec.total.backward_flops, rec.total.uncounted


def _torch_backward(out: Tensor) -> int:
    with FlopCounterMode(display=False) as counter:
        out.sum().backward()
    return int(counter.get_total_flops())


# -- grouped and depthwise convolutions ------------------------------------------------------


def test_depthwise_convolution_backward_is_what_the_kernel_computes() -> None:
    conv = nn.Conv2d(96, 96, 7, padding=3, groups=96, bias=False)
    x = torch.randn(1, 96, 56, 56, requires_grad=True)
    # Hand count: 56*56 positions x 96 channels x 1 input channel each x 49 taps.
    products = 56 * 56 * 96 * 1 * 49
    forward, backward, uncounted = _recorded(lambda: conv(x))
    assert (forward, backward, uncounted) == (2 * products, 2 * 2 * products, ())
    assert 2 * products == 29_503_488
    # FlopCounterMode takes the weight's gradient as an ungrouped convolution: 96x.
    assert _torch_backward(conv(x)) == 2 * products + 96 * 2 * products == 2_861_838_336


@settings(max_examples=40, deadline=None)
@given(
    axes=st.integers(1, 3),
    groups=st.integers(1, 4),
    per_group=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 2),
    transposed=st.booleans(),
    needs=st.sampled_from([(True, True), (True, False), (False, True)]),
)
def test_convolution_backward_is_two_passes_over_the_grouped_iteration_space(
    axes: int,
    groups: int,
    per_group: tuple[int, int],
    kernel: int,
    stride: int,
    transposed: bool,
    needs: tuple[bool, bool],
) -> None:
    c_in, c_out = groups * per_group[0], groups * per_group[1]
    size = [kernel + 2] * axes
    x = torch.empty(2, c_in, *size, device="meta", requires_grad=needs[0])
    shape = (c_in, per_group[1]) if transposed else (c_out, per_group[0])
    w = torch.empty(*shape, *[kernel] * axes, device="meta", requires_grad=needs[1])
    name = f"conv_transpose{axes}d" if transposed else f"conv{axes}d"
    conv = getattr(F, name)
    forward, backward, uncounted = _recorded(lambda: conv(x, w, stride=stride, groups=groups))
    out = conv(x, w, stride=stride, groups=groups)
    # The iteration space: batch x positions x out channels x in channels per group x taps,
    # positions of the output (of the input for a transposed convolution).
    positions = math.prod((x if transposed else out).shape[2:])
    channels = c_in * per_group[1] if transposed else c_out * per_group[0]
    products = 2 * positions * channels * kernel**axes
    assert forward == 2 * products
    assert backward == 2 * products * (needs[0] + needs[1])
    assert uncounted == ()


def test_ungrouped_convolution_backward_equals_flop_counter_mode() -> None:
    conv = nn.Conv2d(8, 16, 3, stride=2, padding=1)
    x = torch.randn(2, 8, 15, 15, requires_grad=True)
    with record() as rec:
        conv(x)
    # and the bias's gradient, an add per element of the (2, 16, 8, 8) output's gradient
    assert torch_counts(rec.session.root)[1] == _torch_backward(conv(x)) + 2 * 16 * 8 * 8


# -- a torch.autograd.Function's backward ----------------------------------------------------


class _Scaled(torch.autograd.Function):
    """Saves tensors and a number on ctx; gives a gradient only where one is needed."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(x, w)
        ctx.scale = scale
        return (x @ w) * scale

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        x, w = ctx.saved_tensors
        grad = grad * ctx.scale
        grad_x = grad @ w.T if ctx.needs_input_grad[0] else None
        grad_w = x.T @ grad if ctx.needs_input_grad[1] else None
        return grad_x, grad_w, None


class _Split(torch.autograd.Function):
    """Two outputs; its backward takes both gradients."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> tuple[Tensor, Tensor]:
        return x * 2, x * 3

    @staticmethod
    def backward(ctx: Any, first: Tensor, second: Tensor) -> Tensor:
        return first * 2 + second * 3


class _ReadsValues(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return grad[x > 0].sum() * torch.ones_like(x)


@pytest.mark.parametrize("needs", [(True, True), (True, False), (False, True)])
def test_a_functions_backward_is_what_its_backward_runs(needs: tuple[bool, bool]) -> None:
    n, d, e = 6, 5, 4
    x = torch.randn(n, d, requires_grad=needs[0])
    w = torch.randn(d, e, requires_grad=needs[1])

    def body() -> Tensor:
        return _Scaled.apply(x, w, 0.5).sum()  # type: ignore[no-any-return, no-untyped-call]

    forward, backward, uncounted = _recorded(body)
    assert uncounted == ()
    assert forward == 2 * n * d * e + n * e + n * e  # matmul, scale, sum
    assert backward == n * e + 2 * n * d * e * (needs[0] + needs[1])
    with FlopCounterMode(display=False) as counter:
        body().backward()
    assert int(counter.get_total_flops()) == 2 * n * d * e * (1 + needs[0] + needs[1])


@pytest.mark.parametrize("needs", [(True, True), (False, True)])
def test_a_flop_counter_mode_around_a_record_counts_only_what_ran(needs: tuple[bool, bool]) -> None:
    # A record predicts a Function's backward by running it on fake tensors, and an op's
    # backward by a replay on meta: a FlopCounterMode held around the record sees neither.
    x = torch.randn(6, 5, requires_grad=needs[0])
    w = torch.randn(5, 4, requires_grad=needs[1])
    layer = nn.Linear(5, 4)

    def body() -> None:
        _Scaled.apply(x, w, 0.5).sum().backward()  # type: ignore[no-untyped-call]
        layer(x).sum().backward()

    with FlopCounterMode(display=False) as alone:
        body()
    with FlopCounterMode(display=False) as around, record() as rec:
        body()
        assert rec.total.flops > 0  # its counts asked for while the mode is still held
    assert around.get_total_flops() == alone.get_total_flops()
    assert around.get_total_flops() == 2 * 6 * 5 * 4 * (1 + needs[0] + needs[1]) * 2


def test_each_call_of_a_function_is_counted_once() -> None:
    x = torch.randn(3, 4, requires_grad=True)

    def body() -> None:
        first, second = _Split.apply(x)  # type: ignore[no-untyped-call]
        (first + second + first).sum()
        third, _ = _Split.apply(x)  # type: ignore[no-untyped-call]
        third.sum()

    _, backward, uncounted = _recorded(body)
    assert uncounted == ()
    # Each call's backward: 2 products and an add per element (12 elements), once however
    # many ops took its outputs; the adds' own backward is free; `first`, read twice, has
    # its two gradients summed (12 adds), and so has x, read by both calls (12 adds: a
    # backward from both results runs 96)
    assert backward == 2 * (3 * 12) + 12 + 12


def test_a_function_returned_by_a_checked_call_is_counted_by_estimate_and_record() -> None:
    @typed_flops
    def scaled(x: Float[Tensor, "n d"], w: Float[Tensor, "d e"]) -> Float[Tensor, "n e"]:
        return _Scaled.apply(x, w, 2.0)  # type: ignore[no-any-return, no-untyped-call]

    cost = scaled.estimate(n=8, d=5, e=3, grad=("w",))
    n, d, e = sympy.symbols("n d e")
    assert sympy.expand(cost.backward_formula - (2 * n * d * e + n * e)) == 0
    assert cost.uncounted == ()
    with record() as rec:
        scaled(torch.randn(8, 5), torch.randn(5, 3, requires_grad=True))
    assert rec.total.backward_flops == cost.backward_flops


def test_a_backward_that_reads_values_is_named_not_counted() -> None:
    x = torch.randn(4, requires_grad=True)
    _, _, uncounted = _recorded(lambda: _ReadsValues.apply(x).sum())  # type: ignore[no-untyped-call]
    assert len(uncounted) == 1 and uncounted[0].startswith("_ReadsValues (backward: ")


def test_fsdp2s_hooks_are_not_run_while_their_module_runs() -> None:
    """FSDP2 gathers a module's parameters before its forward and carries its backward
    steps (reshard, reduce-scatter) on autograd Functions around the module's inputs and
    outputs: a record never runs those to count them, so the module computes with its
    gathered parameters, counted as the same model unsharded (the Functions hand their
    gradients on: 0 FLOPs)."""
    from torch.distributed.fsdp import fully_shard

    from typedflops.planning import ParallelLayout
    from typedflops.planning.rank_run import fake_world

    def model() -> nn.Sequential:
        return nn.Sequential(
            *(nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8)) for _ in range(2))
        )

    x = torch.randn(3, 8)
    whole = model()
    expected = _recorded(lambda: whole(x).sum().backward())
    with fake_world(ParallelLayout(dp=2, zero=3)) as mesh:  # collectives move nothing
        sharded = model()
        for block in sharded:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(sharded, mesh=mesh["dp"])
        assert _recorded(lambda: sharded(x).sum().backward())[:2] == expected[:2]
    per_block = 2 * (2 * 3 * 8 * 8) + 3 * 8  # two linears (addmm: 2mnk), tanh
    assert expected[0] == 2 * per_block + 3 * 8  # and the sum


# -- views, the rule lookup --------------------------------------------------------------------


_VIEWS = [
    lambda x: x.unsqueeze_(0),
    lambda x: x.squeeze_(0),
    lambda x: x.t_(),
    lambda x: x.transpose_(0, 1),
    lambda x: x.swapdims_(0, 1),
    lambda x: x.swapaxes_(0, 1),
    lambda x: x.as_strided_((3, 4), (4, 1)),
    lambda x: x.detach_(),
    lambda x: x.view(4, 3),
    lambda x: x.view(-1),
    lambda x: x.reshape(2, 6),
    lambda x: x.unsqueeze(0),
    lambda x: x.expand(2, 3, 4),
    lambda x: x.permute(1, 0),
    lambda x: x.T,
    lambda x: x.mT,
    lambda x: x.narrow(0, 0, 2),
    lambda x: x.diagonal(),
    lambda x: x.unfold(1, 2, 1),
    lambda x: x.unflatten(1, (2, 2)),
    lambda x: x.movedim(0, 1),
    lambda x: x.split(1),
    lambda x: x.chunk(2, 1),
    lambda x: x.unbind(0),
    lambda x: x.as_strided((2, 2), (1, 1)),
    lambda x: x[1:, ::2],
    lambda x: x.view_as(x),
    lambda x: torch.view_as_real(x.to(torch.complex64)),
    # made in place
    lambda x: x.unsqueeze_(0),
    lambda x: x.squeeze_(),
    lambda x: x.as_strided_((2, 2), (1, 1)),
    lambda x: x.t_(),
    lambda x: x.transpose_(0, 1),
    lambda x: x.swapdims_(0, 1),
    lambda x: x.detach_(),
]


_BAGS = torch.tensor([[1, 2, 3, 4, 5], [0, 0, 9, 9, 9], [2, 4, 6, 8, 1], [3, 3, 3, 3, 3]])
_TABLE = torch.randn(10, 6)


@pytest.mark.parametrize(
    ("body", "forward"),
    [
        # a bag of 5 rows of 6 values, 4 bags: an add per value looked up
        (lambda: F.embedding_bag(_BAGS, _TABLE, mode="sum"), 4 * 5 * 6),
        (lambda: F.embedding_bag(_BAGS, _TABLE, mode="mean"), 4 * 5 * 6 + 4 * 6),
        (lambda: F.embedding_bag(_BAGS, _TABLE, mode="max"), 4 * 5 * 6),
        (
            lambda: F.embedding_bag(
                _BAGS.flatten(),
                _TABLE,
                torch.tensor([0, 5, 10, 15]),
                per_sample_weights=torch.rand(20),
                mode="sum",
            ),
            2 * 20 * 6,
        ),
        (lambda: nn.EmbeddingBag(10, 6, mode="sum")(_BAGS), 4 * 5 * 6),  # weights need grad
        # a scatter that adds as it writes: an add per index
        (
            lambda: torch.zeros(3, 8).scatter_(
                1, torch.tensor([[0, 1], [2, 2], [7, 0]]), 1.0, reduce="add"
            ),
            6,
        ),
        # only the part of src that index covers is added
        (lambda: torch.zeros(3).scatter_add(0, torch.tensor([0, 2]), torch.ones(5)), 2),
        (
            lambda: torch.zeros(3).scatter_reduce(
                0, torch.tensor([0, 2, 2]), torch.ones(5), reduce="amax"
            ),
            3,
        ),
        (lambda: torch.bincount(torch.tensor([0, 1, 1, 3, 3]), weights=torch.rand(5)), 5),
        (lambda: torch.bincount(torch.tensor([0, 1, 1, 3, 3])), 0),  # integer counting
        # F.fold sums the overlapping patches: an add per value folded
        (lambda: F.fold(torch.randn(1, 3 * 2 * 2, 9), (4, 4), 2), 3 * 2 * 2 * 9),
    ],
    ids=[
        "bag-sum",
        "bag-mean",
        "bag-max",
        "bag-weighted",
        "bag-module",
        "scatter-add",
        "scatter_add-src-larger",
        "scatter_reduce-src-larger",
        "bincount-weights",
        "bincount",
        "fold",
    ],
)
def test_ops_that_reduce_as_they_gather_are_counted(body: Any, forward: int) -> None:
    flops, _, uncounted = _recorded(body)
    assert (flops, uncounted) == (forward, ())


@pytest.mark.parametrize(("mode", "per_value"), [("sum", 1), ("mean", 2), ("max", 0)])
def test_an_embedding_bags_backward_adds_each_bags_gradient_into_its_rows(
    mode: str, per_value: int
) -> None:
    bag = nn.EmbeddingBag(10, 6, mode=mode)
    forward, backward, uncounted = _recorded(lambda: bag(_BAGS))
    # 4 bags of 5 rows of 6 values: an add per value (mean: and a divide); max passes
    # each bag's gradient to the row that won
    assert (backward, uncounted) == (per_value * 4 * 5 * 6, ())
    assert forward == 4 * 5 * 6 + (4 * 6 if mode == "mean" else 0)


def test_an_embedding_bags_per_sample_weights_get_their_gradient_counted() -> None:
    bag = nn.EmbeddingBag(10, 6, mode="sum")
    weights = torch.rand(4, 5, requires_grad=True)
    forward, backward, uncounted = _recorded(lambda: bag(_BAGS, per_sample_weights=weights))
    # 4 bags of 5 rows of 6 values: a multiply and an add per value forward; backward the
    # table's gradient (each bag's gradient times its weight, added into the row: 2 per
    # value) and each weight's (its row times its bag's gradient, summed: 2 per value)
    assert (forward, backward, uncounted) == (2 * 120, 2 * 120 + 2 * 120, ())


_POOLED, _PLACES = F.max_pool2d(torch.randn(1, 2, 4, 4), 2, return_indices=True)


def _unpooled() -> Tensor:
    return F.max_unpool2d(_POOLED.detach().requires_grad_(), _PLACES, [2, 2])


@typed_flops
def _affine_grid(theta: Float[Tensor, "n 3 4"]) -> Float[Tensor, "n 2 3 4 3"]:
    return F.affine_grid(theta, [theta.shape[0], 1, 2, 3, 4], align_corners=False)


# 2 grids of 2x3x4 positions, each position's 4 homogeneous coordinates times a 3x4 matrix:
# 2*2*24*4*3 = 1,152; without align_corners the base grid's 2 + 3 + 4 coordinates are
# scaled (a multiply and a divide each): 18. Its backward's product is the same size.
_GRID = 2 * 2 * 24 * 4 * 3


@pytest.mark.parametrize(
    ("body", "forward", "backward"),
    [
        # max unpooling puts each value at its place in zeros, its backward gathers them back
        (_unpooled, 0, 0),
        # a sparse embedding's gradient is the rows' gradients as they are, not summed
        (lambda: nn.Embedding(10, 4, sparse=True)(torch.tensor([1, 2, 2, 5])), 0, 0),
        # a 4x5 matrix's trace: an add per diagonal element
        (lambda: torch.trace(torch.randn(4, 5, requires_grad=True)), 4, 0),
        # 4 cross products: 2 products and a subtract per value; backward 2 more of them
        (
            lambda: torch.linalg.cross(
                torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
            ),
            3 * 12,
            2 * 3 * 12,
        ),
        (lambda: _affine_grid(torch.randn(2, 3, 4, requires_grad=True)), _GRID + 18, _GRID + 18),
        (
            lambda: F.affine_grid(
                torch.randn(2, 3, 4, requires_grad=True), [2, 1, 2, 3, 4], align_corners=True
            ),
            _GRID,
            _GRID,
        ),
    ],
    ids=["max_unpool2d", "sparse-embedding", "trace", "cross", "affine_grid", "aligned"],
)
def test_ops_that_move_values_or_compute_a_little_are_counted_not_named(
    body: Any, forward: int, backward: int
) -> None:
    assert _recorded(body) == (forward, backward, ())


def test_affine_grids_product_is_estimated_as_it_runs() -> None:
    cost = _affine_grid.estimate(n=2, grad=("theta",))
    assert (cost.flops, cost.matmul_flops, cost.backward_flops) == (_GRID + 18, _GRID, _GRID + 18)


def test_ops_that_compute_without_a_rule_are_named_and_splits_are_free() -> None:
    # (antialiased resizing clips its taps at the edges output by output: no rule)
    image = torch.randn(1, 1, 8, 8)
    resized = _recorded(lambda: F.interpolate(image, (4, 4), mode="bilinear", antialias=True))
    assert resized == (0, 0, ("_upsample_bilinear2d_aa",))
    assert find_rule(aten.unsafe_split.Tensor) is FREE
    assert find_rule(aten.unsafe_split_with_sizes.default) is FREE
    assert find_rule(aten._embedding_bag_forward_only.default) is not FREE
    # a channel shuffle moves values (a permutation): free, not listed
    shuffled = _recorded(lambda: F.channel_shuffle(torch.randn(2, 8, 4, 4), 2))
    assert shuffled[0] == 0 and shuffled[2] == ()
    # selections are searches, as sort and topk are; a window is made, as linspace is
    x = torch.randn(4, 8)
    assert _recorded(lambda: (torch.median(x), torch.kthvalue(x, 2, dim=1))) == (0, 0, ())
    assert _recorded(lambda: (torch.mode(x, 1), torch.msort(x))) == (0, 0, ())
    assert _recorded(lambda: (torch.nanmedian(x, dim=1), torch.hann_window(8))) == (0, 0, ())


@pytest.mark.parametrize("view", _VIEWS)
def test_views_cost_nothing_and_are_never_uncounted(view: Any) -> None:
    x = torch.randn(3, 4)
    with record() as rec:
        view(x)
    assert rec.total.flops == 0
    assert rec.total.uncounted == ()


def test_views_made_in_place_move_no_bytes() -> None:
    x = torch.randn(3, 4)
    with record() as rec:
        x.unsqueeze_(0).squeeze_(0).t_()
    assert rec.total.bytes_read == rec.total.bytes_written == 0


def test_find_rule_gives_a_rule_free_or_none() -> None:
    assert find_rule(aten.unsqueeze_.default) is FREE
    assert find_rule(aten.view.default) is FREE
    assert find_rule(aten.empty.memory_format) is FREE
    assert isinstance(find_rule(aten.mm.default), RuleEntry)
    assert isinstance(find_rule(aten.add_.Tensor), RuleEntry)  # as add
    assert find_rule(aten._native_multi_head_attention.default) is None
    assert repr(FREE) == "FREE"
    entry = find_rule(aten.convolution_backward.default)
    assert isinstance(entry, RuleEntry) and entry.source == "typedflops"
    assert entry.matmul_part is not None  # (the gradients' products; the bias's sum is none)


# -- flops= signs ------------------------------------------------------------------------------


@pytest.mark.parametrize("formula", ["-n*d", "-1", "0 - n", "n - 2*n", "-(n + d)**2"])
def test_a_formula_negative_at_every_size_is_refused_at_decoration(formula: str) -> None:
    with pytest.raises(SpecError, match=r"is negative for every size; a count of FLOPs never is"):

        @typed_flops(flops=formula)
        def f(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
            return x


def _refused_in_estimate_and_call(f: Any, message: str, *, n: int, d: int) -> None:
    """``f``'s formula refused, with ``message``, by a dry run and by a recorded call."""
    with pytest.raises(SpecError) as caught:
        f.estimate(n=n, d=d)
    assert str(caught.value) == message
    with pytest.raises(SpecError) as caught, record():
        f(torch.ones(n, d))
    assert str(caught.value) == message


def test_a_formula_that_is_no_whole_number_is_refused_where_it_is_evaluated() -> None:
    @typed_flops(flops="n*d/2")
    def half(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        return x

    @typed_flops(flops="n*d//2")
    def rounded(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        return x

    assert half.estimate(n=4, d=3).flops == 6
    message = (
        "half(): flops=d*n/2 gives 9/2 FLOPs at n=3, d=3; a count is a whole number; "
        "round it in the formula: // rounds down"
    )
    _refused_in_estimate_and_call(half, message, n=3, d=3)
    assert rounded.estimate(n=3, d=3).flops == 4


def test_a_formula_negative_at_some_sizes_is_refused_where_it_is_evaluated() -> None:
    @typed_flops(flops="n - d")
    def f(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        return x

    assert f.estimate(n=5, d=3).flops == 2
    message = "f(): flops=-d + n gives -1 FLOPs at n=2, d=3; a count is never negative"
    _refused_in_estimate_and_call(f, message, n=2, d=3)
    assert rules.declared_flops("f", sympy.sympify("n - d"), {"n": 3, "d": 3}) == 0
