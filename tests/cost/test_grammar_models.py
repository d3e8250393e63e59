"""Every formula ``estimate()`` marks exact holds at other values of every size, on models
built at random from the forms people write (:mod:`grammar_models`): each model is
estimated at its own sizes, then built again at other sizes of its constructor and of its
input and run for real, forward and backward, under ``record()``; each exact term at those
sizes must give what ran, and the matrix products what FlopCounterMode counts. A size the
cost lists as held (``Cost.fixed``) keeps its value; every other size changes, so a size
no formula names must change nothing. Every term is true at the cost's own sizes, heads
of width 1 (``d = n_head``) included."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import sympy
import torch
from grammar_models import (
    IMAGE_STEPS,
    SEQUENCE_STEPS,
    ConfiguredSequence1d,
    Image2d,
    Sequence1d,
    SequenceConfig,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Cost, record, typed_flops
from typedflops.cost.types import above_one

SLOW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SMALL = st.sampled_from([1, 2, 3, 4, 5, 8, 12, 16])


@st.composite
def sequence_sizes(draw: st.DrawFn) -> dict[str, int]:
    """Sizes of a :class:`Sequence1d` and its input, ``d`` a multiple of ``n_head``;
    ``config`` 1 where the model is built from a config object."""
    n_head = draw(st.sampled_from([1, 2, 4, 8]))
    return {
        "batch": draw(SMALL),
        "seq": draw(st.sampled_from([1, 2, 4, 5, 7, 8, 9, 12, 13, 16])),
        "d": n_head * draw(st.integers(1, 4)),
        "hidden": draw(SMALL),
        "n_layers": draw(st.integers(1, 4)),
        "n_head": n_head,
        "kernel": draw(st.integers(1, 5)),
        "config": draw(st.integers(0, 1)),
    }


@st.composite
def image_sizes(draw: st.DrawFn) -> dict[str, int]:
    """Sizes of an :class:`Image2d` and its input."""
    return {
        "batch": draw(st.integers(1, 4)),
        "c": draw(SMALL),
        "h": draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 12, 16])),
        "w": draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 12, 16])),
        "hidden": draw(SMALL),
        "kernel": draw(st.integers(1, 5)),
    }


@dataclasses.dataclass(frozen=True)
class Built:
    """A model, an input of its sizes, and the call's dims."""

    model: nn.Module
    x: Tensor
    dims: dict[str, int]


def _sequence(sizes: Mapping[str, int], steps: tuple[str, ...]) -> Built:
    model = Sequence1d(
        sizes["d"], sizes["hidden"], sizes["n_layers"], sizes["n_head"], sizes["kernel"], steps
    )
    if sizes.get("config"):
        config = SequenceConfig(
            sizes["d"], sizes["hidden"], sizes["n_layers"], sizes["n_head"], sizes["kernel"], steps
        )
        model = ConfiguredSequence1d(config)
    dims = {"batch": sizes["batch"], "seq": sizes["seq"], "d": sizes["d"]}
    return Built(model, torch.randn(dims["batch"], dims["seq"], dims["d"]), dims)


def _image(sizes: Mapping[str, int], steps: tuple[str, ...]) -> Built:
    model = Image2d(sizes["c"], sizes["hidden"], sizes["kernel"], steps)
    dims = {name: sizes[name] for name in ("batch", "c", "h", "w")}
    return Built(model, torch.randn(*dims.values()), dims)


def _ran(built: Built) -> dict[str, int]:
    """What a real run of ``built`` counted, forward and backward, and FlopCounterMode's
    count of its forward's matrix products."""
    x = built.x.clone().requires_grad_(True)
    with record() as rec:
        out = built.model(x)
        out.backward(torch.ones_like(out))
    with FlopCounterMode(display=False) as counter:
        built.model(x)
    return {
        "forward": rec.total.flops,
        "backward": rec.total.backward_flops,
        "matmul": rec.total.matmul_flops,
        "torch": counter.get_total_flops(),
    }


Build = Callable[[Mapping[str, int], tuple[str, ...]], Built]


def _runs(build: Build, sizes: Mapping[str, int], steps: tuple[str, ...]) -> bool:
    """Whether the model runs at ``sizes`` (a pooling of nothing does not)."""
    try:
        _ran(build(sizes, steps))
    except RuntimeError:
        return False
    return True


def assert_exact_terms_hold(
    build: Build, sizes: dict[str, int], steps: tuple[str, ...], others: list[dict[str, int]]
) -> Cost:
    """``estimate()`` of the model built at ``sizes`` is true there, and each term it marks
    exact gives what a real run counted at each of ``others`` (held sizes kept)."""
    built = build(sizes, steps)
    function: Any = type(built.model).forward
    cost: Cost = function.estimate(built.model, grad=("x",), **built.dims)
    ran = _ran(built)
    for name in ("forward", "backward", "matmul"):
        assert cost.terms[name].count == ran[name], (name, cost.terms[name], ran)
    for name, term in cost.terms.items():
        assert term.holds_at(cost.dims), (name, term, cost.dims)
    held = {key.removeprefix("self.") for key in cost.fixed}
    for other in others:
        kept = held | {"config"}  # (the model is built the same way)
        changed = {**sizes, **{k: v for k, v in other.items() if k not in kept}}
        if "n_head" in changed and changed["d"] % changed["n_head"]:
            continue  # (heads must divide the width)
        if not _runs(build, changed, steps):
            continue
        truth = _ran(build(changed, steps))
        values = {**cost.dims, **changed}
        for name in ("forward", "backward", "matmul"):
            term = cost.terms[name]
            if term.exact:
                assert term.at(values) == truth[name], (name, term.formula, changed, truth)
        if cost.matmul.exact:
            assert cost.matmul.at(values) == truth["torch"], (cost.matmul.formula, changed)
    return cost


_AT = {"batch": 2, "seq": 8, "hidden": 4, "n_layers": 1, "kernel": 3, "config": 0}


@SLOW
@given(
    steps=st.lists(st.sampled_from(SEQUENCE_STEPS), min_size=1, max_size=3).map(tuple),
    sizes=sequence_sizes(),
    others=st.lists(sequence_sizes(), min_size=2, max_size=3),
)
# (heads of width 1 with batch = seq = 1: the merge is contiguous again, and the bias goes
# back into the product)
@example(
    steps=("rearrange", "mlp", "mlp"),
    sizes={**_AT, "d": 8, "n_head": 2},
    others=[{"batch": 1, "seq": 1, "d": 8, "hidden": 1, "n_layers": 1, "n_head": 8, "kernel": 1}],
)
# (heads of width 1 after heads of 3: the merge is a view there, and the projection after
# it adds its bias apart)
@example(
    steps=("heads", "mlp"),
    sizes={**_AT, "d": 12, "n_head": 4},
    others=[{**_AT, "d": 4, "n_head": 4}, {**_AT, "d": 8, "n_head": 8, "config": 1}],
)
def test_every_exact_formula_of_a_sequence_model_holds_at_other_sizes(
    steps: tuple[str, ...], sizes: dict[str, int], others: list[dict[str, int]]
) -> None:
    assert_exact_terms_hold(_sequence, sizes, steps, others)


@SLOW
@given(
    steps=st.lists(st.sampled_from(IMAGE_STEPS), min_size=1, max_size=3).map(tuple),
    sizes=image_sizes(),
    others=st.lists(image_sizes(), min_size=2, max_size=3),
)
def test_every_exact_formula_of_an_image_model_holds_at_other_sizes(
    steps: tuple[str, ...], sizes: dict[str, int], others: list[dict[str, int]]
) -> None:
    assert_exact_terms_hold(_image, sizes, steps, others)


def test_forms_that_fit_are_exact_in_the_module_sizes() -> None:
    # a width through a hidden layer, a stack of n_layers, heads of d // n_head, and two
    # branches joined: every size is a symbol checked by rebuilding the model
    steps = ("mlp", "stack", "heads", "concat")
    sizes = {"batch": 2, "seq": 8, "d": 32, "hidden": 12, "n_layers": 3, "n_head": 4, "kernel": 3}
    others = [
        {"batch": 3, "seq": 5, "d": 12, "hidden": 7, "n_layers": 2, "n_head": 2, "kernel": 3},
        {"batch": 1, "seq": 13, "d": 48, "hidden": 20, "n_layers": 5, "n_head": 8, "kernel": 3},
    ]
    cost = assert_exact_terms_hold(_sequence, sizes, steps, others)
    assert cost.exact
    names = {str(s) for term in cost.terms.values() for s in term.formula.free_symbols}
    assert {"batch", "seq", "d", "hidden", "n_layers", "n_head"} <= names
    batch, seq, d, hidden, n_layers = sympy.symbols("batch seq d hidden n_layers")
    # hand count of the products: up and down (4*d*hidden per row), n_layers of d*d (2*d*d
    # each), the heads' two products (2*seq*d each per row), the side branch (2*d*hidden)
    # and the join's (2*(hidden + d)*d)
    products = (
        batch
        * seq
        * (
            4 * d * hidden
            + 2 * n_layers * d**2
            + 4 * seq * d
            + 2 * d * hidden
            + 2 * (hidden + d) * d
        )
    )
    assert sympy.expand(cost.matmul.formula - products) == 0


@dataclasses.dataclass
class WindowConfig:
    hidden: int = 32
    n_head: int = 4
    window: int = 4


class SlidingWindowAttention(nn.Module):
    """Mistral-style attention to the last ``window`` positions, the mask built with
    ``torch.tril`` and ``torch.triu(..., diagonal=-window)``.

    ``x``: (batch, seq, hidden) -> (batch, seq, hidden)."""

    def __init__(self, config: WindowConfig) -> None:
        super().__init__()
        self.config = config
        self.n_head = config.n_head
        self.window = config.window
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.o = nn.Linear(config.hidden, config.hidden)

    @typed_flops
    def forward(self, x: Float[Tensor, "batch seq d"]) -> Float[Tensor, "batch seq d"]:
        batch, seq, d = x.shape
        heads = [
            part.view(batch, seq, self.n_head, d // self.n_head).transpose(1, 2)
            for part in self.qkv(x).split(d, -1)
        ]
        q, k, v = heads
        mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device)
        mask = torch.tril(mask) & torch.triu(mask, diagonal=-self.window)
        scores = (q @ k.transpose(-1, -2)) / (d // self.n_head) ** 0.5
        scores = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        out: Tensor = self.o((scores @ v).transpose(1, 2).reshape(batch, seq, d))
        return out


def test_sliding_window_attention_is_exact_in_its_config() -> None:
    model = SlidingWindowAttention(WindowConfig())
    cost = SlidingWindowAttention.forward.estimate(model, batch=2, seq=16, d=32, grad=("x",))
    assert cost.exact
    batch, seq, d, n_head = sympy.symbols("batch seq d n_head")
    # four projections of 2*d*d per row, two products of 2*seq*d per row (the window
    # masks, it does not skip), and per score the scale, the fill and softmax's 4; with
    # heads of width 1 (several) the merge is a view and the output projection adds its
    # bias apart, d per row
    general = batch * seq * (8 * d**2 + 4 * seq * d + 6 * n_head * seq)
    assert sympy.expand(above_one(cost.formula) - general) == 0
    for heads in (1, 2, 4):
        part = (cost.formula - general).xreplace({d: heads, n_head: heads})
        # (but for one position: (b, h, 1, 1) -> (b, 1, h) is contiguous, the bias fused)
        apart = batch * seq * heads * int(heads > 1) * (1 - sympy.KroneckerDelta(1, seq))
        assert sympy.expand(part - apart) == 0, (heads, part)
    runs = [
        (24, 2, 1, 3, 5),
        (64, 8, 40, 1, 9),
        (16, 4, 3, 2, 3),
        (4, 4, 2, 2, 5),
        (2, 2, 4, 3, 3),
        (4, 4, 2, 3, 1),
    ]
    for hidden, heads, window, b, s in runs:
        again = SlidingWindowAttention(WindowConfig(hidden, heads, window))
        x = torch.randn(b, s, hidden, requires_grad=True)
        with record() as rec:
            out = again(x)
            out.backward(torch.ones_like(out))
        sizes = {"batch": b, "seq": s, "d": hidden, "n_head": heads}
        assert cost.forward.at(sizes) == rec.total.flops
        assert cost.backward.at(sizes) == rec.total.backward_flops


@typed_flops
def pooled_heads(x: Float[Tensor, "batch seq d"]) -> Float[Tensor, "batch 4 half half"]:
    pooled = F.max_pool1d(x.transpose(1, 2), 2, ceil_mode=True).transpose(1, 2)
    batch, half, d = pooled.shape
    heads = pooled.reshape(batch, half, 4, d // 4).transpose(1, 2)
    return heads @ heads.transpose(-1, -2)


def test_a_pooled_size_fitted_at_even_sizes_only_is_not_exact() -> None:
    # ceil(seq/2) rows is seq/2 at every even seq the fits take; the far checks move
    # every dim at once, to sizes 4 heads do not divide, so seq is checked alone
    cost = pooled_heads.estimate(batch=2, seq=16, d=32)
    assert cost.forward.holds_at(cost.dims) and cost.matmul.holds_at(cost.dims)
    for seq in (5, 17):
        x = torch.randn(2, seq, 32)
        half = (seq + 1) // 2
        with record() as rec:
            pooled_heads(x)
        with FlopCounterMode(display=False) as counter:
            pooled_heads(x)
        # 4 heads of half x half dot products over d / 4
        assert rec.total.matmul_flops == counter.get_total_flops() == 2 * 2 * half**2 * 32
        sizes = {**cost.dims, "seq": seq}
        for name, term in cost.terms.items():
            if term.exact:
                assert term.at(sizes) == rec.total.terms[name].count, (name, term, seq)
    assert not cost.matmul.exact


class SlicedKeys(nn.Module):
    """Keys of one head's width, scored against that many of the input's features.

    ``x``: (batch, seq, d) -> (batch, seq, d); ``d`` a multiple of ``n_head``."""

    def __init__(self, d: int, n_head: int) -> None:
        super().__init__()
        if d % n_head:
            raise ValueError("d must be a multiple of n_head")
        self.n_head = n_head
        self.keys = nn.Linear(d, d // n_head)

    @typed_flops
    def forward(self, x: Float[Tensor, "batch seq d"]) -> Float[Tensor, "batch seq d"]:
        key = self.keys(x)
        scores: Tensor = x[..., : key.shape[-1]] @ key.transpose(-1, -2)
        return x + scores.sum(-1, keepdim=True)


def test_a_width_of_one_that_runs_only_with_one_head_is_checked_there() -> None:
    # d = 1 builds only with n_head = 1: both are set to 1 together; there the slice is
    # the whole input and its backward one add fewer per row
    model = SlicedKeys(6, 2)
    cost = SlicedKeys.forward.estimate(model, batch=8, seq=2, d=6, grad=("x",))
    for d, heads in [(1, 1), (4, 1), (6, 6), (8, 2)]:
        x = torch.randn(8, 2, d, requires_grad=True)
        with record() as rec:
            out = SlicedKeys(d, heads)(x)
            out.backward(torch.ones_like(out))
        sizes = {**cost.dims, "d": d, "n_head": heads}
        for name in ("forward", "backward", "matmul"):
            term = cost.terms[name]
            if term.exact:
                assert term.at(sizes) == rec.total.terms[name].count, (name, term, d, heads)
    assert cost.backward.exact
