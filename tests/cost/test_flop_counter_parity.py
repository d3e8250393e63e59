"""Parity with ``torch.utils.flop_counter.FlopCounterMode``: every FLOP figure that torch's own
FlopCounterMode test suite asserts, counted again by typedflops on a CPU, forward and backward.

Each figure is checked three ways where the kernel runs here: the literal figure, a
FlopCounterMode run of the same code, and typedflops' count of the kernels FlopCounterMode has
formulas for (``torch_counts``: forward, and backward predicted per forward op). Kernels that
only run on a GPU (flash, memory-efficient and cuDNN attention, jagged attention) are called on
``meta`` tensors, where they have kernels. ``test_flop_counter_conventions.py`` checks the
same rules against FlopCounterMode's own formula functions at Hypothesis-drawn shapes, and
what typedflops counts where FlopCounterMode counts 0.

=================================  =================================================  =======
torch test                         figures                                            match
=================================  =================================================  =======
flop_counter_variety               3012                                               1 / 1
op                                 240, 720, 720, 720, 28800, 1440                    6 / 6
addmm_out, scaled_mm               2000, 860160                                       2 / 2
backward, backward_reset           5184, 960                                          2 / 2
torchscript                        scripted == eager (250)                            1 / 1
autograd_op                        750                                                1 / 1
convs                              32 and 64, 8 and 16, backward == 2 x forward (12)  16 / 16
module (resnet18), inference_mode  10884440064, 924844032, 1849688064, equal          4 / 4
conv_transpose_loop                1536000                                            1 / 1
custom, custom_op                  5, 20, 9001                                        3 / 3
sdpa                               134217728 (x4), 3x and 3.5x (x4), 268435456 (x2),  12 / 12
                                   805306368, 939524096
sdpa_nested_tensor                 nested == dense: forward (3), backward (3)         3 / 6 *
nested_attention_fake_tensors      fake == dense                                      1 / 1
pytrees                            12000, 6000                                        2 / 2
total                                                                                 55 / 58
=================================  =================================================  =======

``*`` Deliberate conventions (see ``typedflops.cost.engine.rules``): a jagged attention
kernel's backward is predicted from shapes, so at the longest sequence for every sequence
(its forward, from the real offsets, matches).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from flop_parity import (
    FUSED_OPS,
    KERNELS,
    M,
    T,
    aten,
    attention_backward_flops,
    attention_flops,
    offsets,
    ours,
    torch_total,
)
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import (
    FlopCounterMode,
)

from typedflops import record, register_rule
from typedflops.cost.engine import rules
from typedflops.cost.engine.recorder import torch_counts
from typedflops.cost.engine.rules import FLOP_COUNTER_CORRECTIONS, find_rule
from typedflops.testing import assert_matches_flop_counter

Body = Callable[[], Any]


# -- matrix products and convolutions: the forward figures ---------------------------------

_LINEAR = nn.Linear(9, 10)


def _variety() -> None:
    torch.mm(T(4, 5), T(5, 6))
    torch.addmm(T(4, 6), T(4, 5), T(5, 6), beta=0.5, alpha=0.5)
    torch.matmul(T(5, 6), T(6, 7))
    torch.einsum("ab,bc->ac", T(6, 7), T(7, 8))
    _LINEAR(T(8, 9))


def _three_addmms() -> None:
    torch.addmm(T(4, 6), T(4, 5), T(5, 6))
    torch.addmm(T(4, 1), T(4, 5), T(5, 6))  # a broadcast bias is not counted
    torch.addmm(T(6), T(4, 5), T(5, 6))


def _scaled_mm() -> Tensor:
    a = torch.randn(3 * 16, 5 * 16).to(torch.float8_e4m3fn)
    b = torch.randn(7 * 16, 5 * 16).to(torch.float8_e4m3fn).t()
    one = torch.ones(())
    return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


FORWARD_FIGURES: list[tuple[str, Body, int]] = [
    ("variety", _variety, 3012),
    ("mm", lambda: torch.mm(T(4, 5), T(5, 6)), 240),
    ("bmm", lambda: torch.bmm(T(3, 4, 5), T(3, 5, 6)), 720),
    ("addmm", _three_addmms, 720),
    ("baddbmm", lambda: torch.baddbmm(T(3, 4, 6), T(3, 4, 5), T(3, 5, 6)), 720),
    ("conv2d", lambda: torch.conv2d(T(2, 3, 6, 6), T(6, 3, 4, 4), padding=1), 28800),
    ("conv1d", lambda: torch.conv1d(T(2, 3, 6), T(6, 3, 4), padding=1), 1440),
    ("mm out=", lambda: torch.mm(T(10, 10), T(10, 10), out=torch.zeros(10, 10)), 2000),
    ("scaled_mm", _scaled_mm, 860160),
]


@pytest.mark.parametrize(
    ("body", "figure"), [c[1:] for c in FORWARD_FIGURES], ids=[c[0] for c in FORWARD_FIGURES]
)
def test_forward_figures(body: Body, figure: int) -> None:
    assert ours(body)[0] == torch_total(body) == figure


def test_backward_figure() -> None:
    def chain(a: Tensor) -> Tensor:
        a = torch.mm(a, T(5, 6))
        return torch.bmm(a.unsqueeze(0).expand(7, 4, 6), T(7, 6, 7))

    compared = assert_matches_flop_counter(chain, T(4, 5, grad=True), loss=torch.sum)
    assert compared.backward is not None
    assert compared.forward + compared.backward == 5184


def test_backward_run_twice_inside_record() -> None:
    a = T(4, 5, grad=True)

    def twice() -> None:
        for _ in range(2):
            a.mm(a.t()).sum().backward()

    with FlopCounterMode(display=False) as counter:
        twice()
    forward, backward = ours(twice)  # the backward runs are predicted, not counted again
    assert forward + backward == counter.get_total_flops() == 960


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
def test_torchscript_is_counted_at_dispatch_level() -> None:
    def square(x: Tensor) -> Tensor:
        return torch.mm(x, x)

    scripted = torch.jit.script(square)
    x = T(5, 5)
    assert ours(lambda: scripted(x)) == ours(lambda: square(x)) == (250, 0)
    assert torch_total(lambda: scripted(x)) == 250
    compared = assert_matches_flop_counter(scripted, T(5, 5, grad=True), loss=torch.sum)
    assert (compared.forward, compared.backward) == (250, 500)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
def test_torchscript_elementwise_calls_stay_counted() -> None:
    @torch.jit.script
    def act(x: Tensor) -> Tensor:
        return torch.relu(x * 2.0 + 1.0)

    x = T(8, 4)
    for _ in range(4):  # past the profiling runs, the optimized graph runs through the dispatcher
        with record() as rec:
            act(x)
        assert [(op.op, op.flops) for op in rec.total.ops] == [
            ("mul", 32),
            ("add", 32),
            ("relu", 32),
        ]


class _SquareTwiceBack(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return torch.mm(x, x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return torch.mm(grad, grad) + torch.mm(grad, grad)


def test_autograd_function_backward_is_counted() -> None:
    a = T(5, 5, grad=True)

    def body() -> None:
        _SquareTwiceBack.apply(a).sum().backward()  # type: ignore[no-untyped-call]

    assert torch_total(body) == 750
    with record() as rec:
        body()
    # The forward mm (250), and the two mms the Function's backward runs (500), run on fake
    # tensors when the sum takes its output.
    assert torch_counts(rec.session.root) == (250, 500)
    assert rec.total.uncounted == ()
    assert rec.total.backward_flops == 500 + 25  # and the product's add


# -- convolutions, forward and backward ----------------------------------------------------


def _conv_cases() -> Iterator[
    tuple[str, Callable[[Tensor, Tensor], Tensor], Tensor, Tensor, int | None]
]:
    torch.manual_seed(0)
    yield (
        "transposed 1x1x2x2",
        F.conv_transpose2d,
        T(1, 1, 2, 2, grad=True),
        T(1, 1, 2, 2, grad=True),
        32,
    )
    yield "conv 1x1 kernel", F.conv2d, T(1, 1, 2, 2, grad=True), T(1, 1, 1, 1, grad=True), 8
    for c_in, c_out in [(1, 1), (1, 3), (3, 1), (3, 7), (2, 4), (4, 2)]:
        x = T(1, c_in, 4, 4, grad=True)
        yield f"conv {c_in}->{c_out}", F.conv2d, x, T(c_out, c_in, 2, 2, grad=True), None
        yield (
            f"transposed {c_in}->{c_out}",
            F.conv_transpose2d,
            x,
            T(c_in, c_out, 2, 2, grad=True),
            None,
        )


CONV_CASES = list(_conv_cases())


@pytest.mark.parametrize(
    ("conv", "x", "w", "figure"), [c[1:] for c in CONV_CASES], ids=[c[0] for c in CONV_CASES]
)
def test_conv_backward_is_twice_forward(
    conv: Callable[[Tensor, Tensor], Tensor], x: Tensor, w: Tensor, figure: int | None
) -> None:
    compared = assert_matches_flop_counter(conv, x, w, loss=torch.sum)
    assert compared.backward == 2 * compared.forward
    if figure is not None:
        assert compared.forward == figure


def test_conv_transpose_loop_with_backward_inside_record() -> None:
    x = torch.rand(1, 4, 30, 2)
    model = nn.ConvTranspose2d(4, 8, (2, 2), stride=2)

    def loop() -> None:
        for _ in range(50):
            model(x).sum().backward()

    # FlopCounterMode's 1,536,000 and the bias's gradient, an add per element of the
    # (1, 8, 60, 4) output's gradient, 50 times (FlopCounterMode given that formula)
    corrected = torch_total(loop, custom_mapping=FLOP_COUNTER_CORRECTIONS)
    assert sum(ours(loop)) == corrected == torch_total(loop) + 50 * 8 * 60 * 4 == 1632000


class _Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + (x if self.down is None else self.down(x)))


class _ResNet18(nn.Module):
    """torchvision's resnet18, layer for layer (its FLOPs, not its weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
        self.layers = nn.ModuleList(
            nn.Sequential(_Block(i, o, s), _Block(o, o, 1)) for i, o, s in widths
        )
        self.fc = nn.Linear(512, 1000)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x)
        for layer in self.layers:
            x = layer(x)
        logits: Tensor = self.fc(x.mean(dim=(2, 3)))
        return logits


def test_resnet18_figures_on_meta() -> None:
    model = _ResNet18().to("meta")
    image = M(1, 3, 224, 224, dtype=torch.float32)
    with record() as rec:
        model(image)
    assert sum(torch_counts(rec.session.root)) == 10884440064
    assert torch_total(lambda: model(image), backward=True) == 10884440064
    assert rec.total.uncounted == ()
    layer1 = model.layers[0]
    assert ours(lambda: layer1(M(1, 64, 56, 56, dtype=torch.float32))) == (924844032, 1849688064)
    with torch.inference_mode(), record() as inference:
        model(M(1, 3, 224, 224, dtype=torch.float32, grad=False))
    assert torch_counts(inference.session.root) == (torch_counts(rec.session.root)[0], 0)


def test_pytree_modules_with_inplace_relu() -> None:
    class Square(nn.Module):
        def forward(self, x: dict[str, Tensor]) -> dict[str, Tensor]:
            y = x["a"].relu_()
            return {"a": torch.mm(y, y)}

    twice = nn.Sequential(Square(), Square())
    body = lambda: twice({"a": T(10, 10, grad=True).clone()})["a"]  # noqa: E731
    assert sum(ours(body)) == torch_total(body, backward=True) == 12000

    class Tupled(nn.Module):
        def forward(self, x: Tensor) -> tuple[Tensor]:
            return (torch.mm(x, x),)

    tupled = Tupled()
    body = lambda: tupled(T(10, 10, grad=True))[0]  # noqa: E731
    assert sum(ours(body)) == torch_total(body, backward=True) == 6000


# -- custom rules and custom ops -----------------------------------------------------------


@pytest.fixture
def own_rules(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Rules registered inside the test are gone after it."""
    monkeypatch.setattr(rules, "_USER", {})
    find_rule.cache_clear()
    yield
    monkeypatch.undo()
    find_rule.cache_clear()


def test_a_rule_for_an_aten_op_replaces_the_convention(own_rules: None) -> None:
    a = T(4, 5)
    register_rule(aten.add)(lambda *args, **kwargs: 5)
    with record() as rec:
        a + a
    assert (
        rec.total.flops
        == 5
        == torch_total(lambda: a + a, custom_mapping={aten.add: lambda *a, **k: 5})
    )

    def by_output(*args: Any, out_val: Tensor) -> int:
        return out_val.numel()

    by_output._get_raw = True  # type: ignore[attr-defined]
    register_rule(aten.add)(lambda x, y, **kwargs: max(x.numel(), y.numel()))  # a + a
    with record() as rec:
        a + a
    assert rec.total.flops == 20 == torch_total(lambda: a + a, custom_mapping={aten.add: by_output})


@torch.library.custom_op("typedflops_parity::sine", mutates_args=())
def _sine(x: Tensor) -> Tensor:
    return x.sin()


@register_rule(_sine)
def _sine_flops(x: Tensor) -> int:
    return 9001


def test_custom_op_with_a_rule_is_counted() -> None:
    x = T(3)
    with record() as rec:
        _sine(x)
    mapping = {torch.ops.typedflops_parity.sine: lambda *a, **k: 9001}
    assert (rec.total.flops, rec.total.uncounted) == (9001, ())
    assert torch_total(lambda: _sine(x), custom_mapping=mapping) == 9001


# -- attention: the math, flash, memory-efficient and cuDNN kernels ------------------------

UNIFORM, NONUNIFORM = (4, 8, 128, 128, 64), (4, 8, 128, 256, 64)
# (kernel, shape b h s_q s_k d, forward, forward + backward): math's backward is its two
# grad matmuls per matmul (2x forward), a fused kernel's backward 2.5x forward.
SDPA_FIGURES = [
    *((kernel, UNIFORM, 134217728, 134217728 * 3) for kernel in ("math",)),
    *(
        (kernel, UNIFORM, 134217728, 134217728 * 7 // 2)
        for kernel in ("flash", "efficient", "cudnn")
    ),
    ("math", NONUNIFORM, 268435456, 805306368),
    ("efficient", NONUNIFORM, 268435456, 939524096),
]


@pytest.mark.parametrize(("kernel", "shape", "forward", "total"), SDPA_FIGURES)
def test_attention_figures(kernel: str, shape: tuple[int, ...], forward: int, total: int) -> None:
    b, h, s_q, s_k, d = shape
    q, k, v = M(b, h, s_q, d), M(b, h, s_k, d), M(b, h, s_k, d)
    compared = assert_matches_flop_counter(KERNELS[kernel], q, k, v, loss=torch.sum)
    assert compared.backward is not None
    assert (compared.forward, compared.forward + compared.backward) == (forward, total)


def test_cpu_flash_attention_is_counted_like_the_fused_kernels() -> None:
    # FlopCounterMode has no formula for the CPU flash kernel (it counts 0); its formulas
    # for the GPU kernels apply, forward and backward.
    q, k, v = M(*UNIFORM[:3], 64), M(4, 8, 128, 64), M(4, 8, 128, 64)
    with record() as rec:
        FUSED_OPS["cpu_flash"](q, k, v, 0.0, True)
    assert (rec.total.flops, rec.total.backward_flops) == (134217728, 134217728 * 5 // 2)
    q, k, v = T(2, 3, 5, 8, grad=True), T(2, 3, 7, 8, grad=True), T(2, 3, 7, 8, grad=True)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), record() as rec:
        F.scaled_dot_product_attention(q, k, v)
    assert [op.op for op in rec.total.ops] == ["scaled_dot_product_attention"]
    assert rec.total.flops == attention_flops(q.shape, k.shape, v.shape)
    assert rec.total.backward_flops == attention_backward_flops(q.shape, q.shape, k.shape, v.shape)


# -- jagged (nested) tensors ---------------------------------------------------------------


JAGGED_CONFIGS = {"uniform": (128, 128), "differing": (128, 256)}


@pytest.mark.parametrize(
    ("kernel", "config"),
    [("flash", "uniform"), ("efficient", "uniform"), ("efficient", "differing")],
)
def test_jagged_attention_kernels_count_each_sequence(kernel: str, config: str) -> None:
    heads, d = 8, 64
    max_q, max_k = JAGGED_CONFIGS[config]
    lengths_q = [max_q // 4 * i for i in range(1, 5)]
    lengths_k = [max_k // 4 * i for i in range(1, 5)]
    off_q, off_k = offsets(lengths_q), offsets(lengths_k)
    lead = () if kernel == "flash" else (1,)  # flash takes (rows, heads, d), efficient (1, ...)
    q, k, v = (
        M(*lead, sum(lengths_q), heads, d),
        M(*lead, sum(lengths_k), heads, d),
        M(*lead, sum(lengths_k), heads, d),
    )

    def jagged(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if kernel == "flash":
            out: Tensor = aten._flash_attention_forward(
                q, k, v, off_q, off_k, max_q, max_k, 0.0, False, False
            )[0]
        else:
            out = aten._efficient_attention_forward(
                q, k, v, None, off_q, off_k, max_q, max_k, 0.0, 0, False
            )[0]
        return out

    dense_forward = dense_backward = 0
    for s_q, s_k in zip(lengths_q, lengths_k, strict=True):
        one = M(1, heads, s_q, d), M(1, heads, s_k, d), M(1, heads, s_k, d)
        dense_forward += torch_total(functools.partial(KERNELS[kernel], *one))
        dense_backward += torch_total(functools.partial(KERNELS[kernel], *one), backward=True)
    with FlopCounterMode(display=False) as counter:
        jagged(q, k, v).sum().backward()
    assert counter.get_total_flops() == dense_backward  # torch's figure: nested == dense
    forward, backward = ours(lambda: jagged(q, k, v))
    assert forward == dense_forward
    # Convention: a backward is predicted from shapes, never values: every sequence at the
    # longest (the bound FlopCounterMode itself takes when the offsets are fake).
    bound = 4 * attention_backward_flops(*[(1, heads, s, d) for s in (max_q, max_q, max_k, max_k)])
    assert backward == bound


def test_jagged_attention_with_fake_offsets_counts_the_longest_sequence() -> None:
    x = M(123, 4, 16, dtype=torch.bfloat16, grad=False)
    fake = offsets([30, 30, 30, 33], device="meta")

    def body() -> Any:
        return aten._flash_attention_forward(x, x, x, fake, fake, 40, 40, 0.0, False, False)

    dense = M(4, 40, 4, 16, dtype=torch.bfloat16, grad=False).transpose(1, 2)
    figure = torch_total(
        lambda: aten._flash_attention_forward(
            dense, dense, dense, None, None, 40, 40, 0.0, False, False
        )
    )
    assert ours(body)[0] == torch_total(body) == figure == 1638400
