"""What typedflops counts where FlopCounterMode has a formula, checked against its formula
functions at Hypothesis-drawn shapes, and what it counts where FlopCounterMode counts 0 (or
cannot run), by the conventions of ``typedflops.cost.engine.rules``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from flop_parity import (
    FUSED_OPS,
    KERNELS,
    M,
    T,
    attention_backward_flops,
    attention_flops,
    offsets,
    ours,
    torch_total,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn
from torch.utils.flop_counter import (
    conv_flop_count,
)

import typedflops
from typedflops import record
from typedflops.cost.engine.recorder import torch_counts
from typedflops.cost.engine.rules import RuleEntry, find_rule
from typedflops.testing import assert_matches_flop_counter


@settings(max_examples=30, deadline=None)
@given(
    kernel=st.sampled_from(sorted(FUSED_OPS)),
    batch=st.integers(1, 3),
    heads=st.integers(1, 4),
    s_q=st.integers(1, 9),
    s_k=st.integers(1, 9),
    d=st.integers(1, 8),
    d_v=st.integers(1, 8),
)
def test_fused_attention_rules_follow_torch_formulas(
    kernel: str, batch: int, heads: int, s_q: int, s_k: int, d: int, d_v: int
) -> None:
    if kernel in ("flash", "cpu_flash"):
        d_v = d  # the flash kernels take one head size
    q, k, v = M(batch, heads, s_q, d), M(batch, heads, s_k, d), M(batch, heads, s_k, d_v)
    out = (batch, heads, s_q, d_v)
    entry = find_rule(FUSED_OPS[kernel].default)
    assert isinstance(entry, RuleEntry) and entry.matmul
    with record() as rec:
        (KERNELS.get(kernel) or (lambda q, k, v: FUSED_OPS[kernel](q, k, v)[0]))(q, k, v)
    assert rec.total.flops == attention_flops(q.shape, k.shape, v.shape)
    assert rec.total.backward_flops == attention_backward_flops(out, q.shape, k.shape, v.shape)
    if kernel != "cpu_flash":
        assert_matches_flop_counter(KERNELS[kernel], q, k, v, loss=torch.sum)


# -- what FlopCounterMode leaves at 0, by the conventions ----------------------------------


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_conv_transpose_is_counted_in_every_dimension(dims: int) -> None:
    conv = getattr(nn, f"ConvTranspose{dims}d")(3, 5, kernel_size=3, stride=2)
    x = T(2, 3, *[5] * dims, grad=True)
    compared = assert_matches_flop_counter(conv, x, loss=torch.sum)
    out = conv(x)
    assert compared.forward == conv_flop_count(
        list(x.shape), list(conv.weight.shape), list(out.shape), True
    )
    # the input's and the weight's gradients, and the bias's: an add per output element
    assert compared.backward == 2 * compared.forward + out.numel()


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_convolution_rules_follow_torch_formulas(data: st.DataObject) -> None:
    dims, transposed = data.draw(st.integers(1, 3)), data.draw(st.booleans())
    groups = data.draw(st.integers(1, 2))
    c_in, c_out = groups * data.draw(st.integers(1, 3)), groups * data.draw(st.integers(1, 3))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(dims)]
    size = [data.draw(st.integers(k, k + 3)) for k in kernel]
    stride, padding = (
        data.draw(st.integers(1, 2)),
        0 if transposed else data.draw(st.integers(0, 1)),
    )
    grad_x, grad_w = data.draw(st.sampled_from([(True, True), (True, False), (False, True)]))
    x = M(data.draw(st.integers(1, 2)), c_in, *size, dtype=torch.float32, grad=grad_x)
    if transposed:
        w = M(c_in, c_out // groups, *kernel, dtype=torch.float32, grad=grad_w)
        conv = getattr(F, f"conv_transpose{dims}d")
    else:
        w = M(c_out, c_in // groups, *kernel, dtype=torch.float32, grad=grad_w)
        conv = getattr(F, f"conv{dims}d")

    def call(x: Tensor, w: Tensor) -> Tensor:
        return conv(x, w, stride=stride, padding=padding, groups=groups)  # type: ignore[no-any-return]

    compared = assert_matches_flop_counter(call, x, w, loss=torch.sum)
    out = call(x, w)
    assert compared.forward == conv_flop_count(
        list(x.shape), list(w.shape), list(out.shape), transposed
    )


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(["mm", "addmm", "bmm", "baddbmm", "matmul", "linear"]),
    sizes=st.tuples(*[st.integers(1, 6)] * 4),
    grads=st.sampled_from([(True, True), (True, False), (False, True)]),
)
def test_matrix_products_follow_torch_formulas(
    name: str, sizes: tuple[int, int, int, int], grads: tuple[bool, bool]
) -> None:
    b, m, k, n = sizes
    batched = name in ("bmm", "baddbmm", "matmul")
    a = M(*(b,) * batched, m, k, dtype=torch.float32, grad=grads[0])
    w = M(*(b,) * (name in ("bmm", "baddbmm")), k, n, dtype=torch.float32, grad=grads[1])
    bias = M(n, dtype=torch.float32, grad=False)
    calls: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
        "mm": torch.mm,
        "addmm": lambda a, w: torch.addmm(bias, a, w),
        "bmm": torch.bmm,
        "baddbmm": lambda a, w: torch.baddbmm(bias, a, w),
        "matmul": torch.matmul,
        "linear": lambda a, w: F.linear(a, w.t(), bias),
    }
    compared = assert_matches_flop_counter(calls[name], a, w, loss=torch.sum)
    assert compared.forward == 2 * b**batched * m * k * n


def test_reflected_operators_count_like_their_plain_forms() -> None:
    x = T(3, 4)
    figures: dict[str, tuple[Callable[[], Tensor], int]] = {
        "1.0 / x": (lambda: 1.0 / x, 24),
        "2 - x": (lambda: 2 - x, 12),
        "2 ** x": (lambda: 2**x, 12),
        "2 * x": (lambda: 2 * x, 12),
        "2 + x": (lambda: 2 + x, 12),
    }
    for text, (body, figure) in figures.items():
        with record() as rec:
            body()
        assert (text, rec.total.flops, rec.total.uncounted) == (text, figure, ())


def test_boolean_masks_and_batch_counters_cost_nothing() -> None:
    mask = torch.rand(6, 5) > 0.5
    with record() as rec:
        flipped = ~mask
        both = mask & flipped
    assert both.sum() == 0
    assert (rec.total.flops, rec.total.uncounted) == (0, ())
    norm = nn.BatchNorm2d(3)
    with record() as rec:
        norm(T(2, 3, 4, 4))
    assert norm.num_batches_tracked is not None and norm.num_batches_tracked.item() == 1
    assert rec.total.flops == (5 + 2) * 2 * 3 * 4 * 4  # the counter's += 1 adds nothing
    assert rec.total.uncounted == ()


def test_einsum_with_a_summed_axis_is_counted_as_torch_runs_it() -> None:
    a, b = T(2, 3, 4), T(3, 5)

    bodies: list[Callable[[], Tensor]] = [
        lambda: torch.einsum("i j h, j k -> i k", a, b),
        lambda: typedflops.einsum(a, b, "i j h, j k -> i k"),
    ]
    for body in bodies:
        with record() as rec:
            body()
        # torch sums h out first (one add per element of a), then one 2x3 @ 3x5 matmul
        assert (rec.total.flops, torch_counts(rec.session.root)[0]) == (
            2 * 3 * 4 + 2 * 2 * 3 * 5,
            60,
        )
        assert torch_total(body) == 60


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 12), min_size=4, max_size=5))
def test_raw_einsum_chains_are_counted_in_torch_order(sizes: list[int]) -> None:
    letters = "abcde"[: len(sizes)]
    operands = [
        M(sizes[i], sizes[i + 1], dtype=torch.float32, grad=False) for i in range(len(sizes) - 1)
    ]
    equation = (
        ",".join(letters[i : i + 2] for i in range(len(sizes) - 1)) + f"->{letters[0]}{letters[-1]}"
    )
    body = lambda: torch.einsum(equation, *operands)  # noqa: E731
    assert ours(body)[0] == torch_total(body)


def test_jagged_ops_count_their_dense_values() -> None:
    values = T(10, 6, grad=True)
    jagged = torch.nested.nested_tensor_from_jagged(values, offsets([3, 7]))
    w, linear = T(6, 4, grad=True), nn.Linear(6, 4)
    cases: list[tuple[str, Callable[[], Any], Callable[[], Any], int]] = [
        ("mul", lambda: jagged * 2, lambda: values * 2, 60),
        ("matmul", lambda: jagged @ w, lambda: values @ w, 480),
        ("linear", lambda: linear(jagged), lambda: linear(values), 480),  # addmm: bias free
    ]
    for name, body, dense, figure in cases:
        with record() as rec:
            body()
        # The ops that ran on the values (only the 10 rows there are), as on the dense values;
        # the backward runs on jagged tensors, which no replay builds: named, not predicted.
        with record() as flat:
            dense()
        assert (rec.total.flops, flat.total.flops) == (figure, figure)
        assert torch_counts(rec.session.root)[0] == torch_total(dense)
        assert (rec.total.backward_flops, rec.total.uncounted) == (
            0,
            (f"{name} (backward, jagged)",),
        )


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")
def test_jagged_attention_on_cpu_counts_the_padded_kernel_it_runs() -> None:
    batch, heads, d, lengths = 4, 2, 8, [4, 8, 12, 16]
    jagged = [
        torch.nested.nested_tensor_from_jagged(
            T(sum(lengths), heads * d, grad=True), offsets(lengths)
        )
        .view(batch, -1, heads, d)
        .transpose(1, 2)
        for _ in range(3)
    ]
    with record() as rec:
        F.scaled_dot_product_attention(jagged[0], jagged[1], jagged[2])
    # On a CPU the math kernel pads every sequence to the longest: those are its FLOPs.
    padded = (batch, heads, max(lengths), d)
    assert torch_counts(rec.session.root) == (attention_flops(padded, padded, padded), 0)
    # Its backward runs on nested tensors the replay cannot build: named, not a silent 0.
    assert rec.total.uncounted and all("(backward" in name for name in rec.total.uncounted)


@torch.library.custom_op("typedflops_parity::cosine", mutates_args=())
def _cosine(x: Tensor) -> Tensor:
    return x.cos()


def test_custom_op_without_a_rule_is_named() -> None:
    with record() as rec:
        _cosine(T(3))
    assert (rec.total.flops, rec.total.uncounted) == (0, ("typedflops_parity.cosine",))
    assert "typedflops_parity.cosine" in rec.table()
