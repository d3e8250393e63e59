"""Dry runs for a device cost the kernels that device runs, on whatever machine they run:
attention through the fused kernel a GPU would pick (found without a GPU), RMS norm
through CUDA's fused kernel (a stand-in with its outputs, saved tensors and backward), and
custom ops with a registered autograd formula, whose backward a replay counts."""

from __future__ import annotations

import pytest
import sympy
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

import typedflops
from typedflops import register_rule, typed_flops
from typedflops.cost.engine import kernels
from typedflops.cost.engine.attention_choice import AttentionCall, gpu_choice
from typedflops.cost.engine.kernels import kernels_of
from typedflops.cost.engine.stand_ins import fused_rms_norm
from typedflops.cost.types import above_one
from typedflops.devices import DeviceSpec, resolve
from typedflops.memory import training_memory
from typedflops.nn import RMSNorm, TransformerConfig, TransformerLM
from typedflops.planning.planner import plan

ON = (True, True, True, True)


@pytest.mark.parametrize(
    ("dtype", "heads", "masked", "grouped", "flags", "expected"),
    [
        (torch.bfloat16, (64, 64, 64), False, False, ON, "flash"),
        (torch.float16, (256, 256, 256), False, True, ON, "flash"),
        (torch.bfloat16, (512, 512, 512), False, False, ON, "efficient"),
        (torch.bfloat16, (64, 64, 64), True, False, ON, "efficient"),
        (torch.float32, (64, 64, 64), False, False, ON, "efficient"),
        (torch.float32, (64, 64, 32), True, False, ON, "efficient"),
        (torch.float32, (62, 62, 62), False, False, ON, "math"),
        (torch.float64, (64, 64, 64), False, False, ON, "math"),
        (torch.float32, (64, 64, 64), False, True, ON, "math"),
        (torch.bfloat16, (64, 64, 64), False, False, (False, True, True, True), "efficient"),
        (torch.bfloat16, (64, 64, 64), False, False, (False, False, True, True), "math"),
    ],
)
def test_a_gpu_choice_found_without_a_gpu(
    dtype: torch.dtype,
    heads: tuple[int, int, int],
    masked: bool,
    grouped: bool,
    flags: tuple[bool, ...],
    expected: str,
) -> None:
    """torch's order on a GPU of unknown capability, taken as an A100 (sm80): flash
    (16-bit, no mask, equal head sizes <= 256), memory-efficient (float32 or 16-bit, head
    sizes aligned to 4 or 8 elements, no grouped query heads), math; a backend whose flag
    is off is passed over."""
    codes = {"flash": kernels._FLASH, "efficient": kernels._EFFICIENT, "math": kernels._MATH}
    call = AttentionCall(dtype, heads, dtype if masked else None, grouped=grouped)
    assert gpu_choice(call, flags) == codes[expected]


def test_a_cpu_choice_is_torchs_whatever_mode_asks_first() -> None:
    """The CPU's attention choice is asked of torch once and kept: asked first inside a
    FakeTensorMode (a dry run of FSDP), it is still the one real tensors get (flash for
    float32), not the math the fake tensors would get."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    query = torch.zeros(1, 1, 1, 8)
    real = torch._fused_sdp_choice(query, query, query, is_causal=True)
    kernels._cached_choice.cache_clear()
    try:
        with FakeTensorMode():
            first = kernels._choice(
                "cpu", kernels._arguments((query, query, query), {"is_causal": True})
            )
        again = kernels._choice(
            "cpu", kernels._arguments((query, query, query), {"is_causal": True})
        )
    finally:
        kernels._cached_choice.cache_clear()
    assert first == again == real == kernels._FLASH


@typed_flops
def attend(
    q: Float[Tensor, "b h s d"], k: Float[Tensor, "b h s d"], v: Float[Tensor, "b h s d"]
) -> Float[Tensor, "b h s d"]:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


SIZES = {"b": 2, "h": 4, "s": 16, "d": 64}


def test_attention_for_a_gpu_is_its_fused_kernel_on_any_machine() -> None:
    """bfloat16 for CUDA: flash attention (what an H100 runs), FlopCounterMode's 4bhs^2d
    forward and 2.5x that backward; beyond its arguments it keeps its output and a float32
    log-sum-exp per query and head, and flash its random-number state (a typed function,
    with no weights to say where it runs, is costed as kernels_of says). float32: the
    memory-efficient kernel, the same FLOPs and a float32 output, its log-sum-exp padded to
    32 queries. With only math allowed: the s x s matrices are kept and the softmax
    counted."""
    grad = ("q", "k", "v")
    with kernels_of("cuda"):
        flash = attend.estimate(**SIZES, dtype=torch.bfloat16, grad=grad)
        efficient = attend.estimate(**SIZES, dtype=torch.float32, grad=grad)
        with sdpa_kernel(SDPBackend.MATH):
            math = attend.estimate(**SIZES, dtype=torch.bfloat16, grad=grad)
    b, h, s, d = sympy.symbols("b h s d")
    for fused in (flash, efficient):
        assert fused.matmul_formula == 4 * b * h * s**2 * d
        assert fused.backward_formula == 10 * b * h * s**2 * d
    # (and its random state: a seed of two uint64 words and a uint64 offset, 24 bytes)
    assert sympy.expand(flash.activation_formula) == 2 * b * h * s * d + 4 * b * h * s + 24
    # the memory-efficient kernel's log-sum-exp has its queries padded to a multiple of 32
    # (16 -> 32), and its seed and offset are two int64s
    assert efficient.activation_bytes == 4 * 2 * 4 * 16 * 64 + 4 * 2 * 4 * 32 + 16
    assert math.backward_formula != flash.backward_formula
    assert sympy.degree(math.activation_formula, s) == 2


def test_rms_norm_for_cuda_is_its_fused_kernel() -> None:
    """CUDA's _fused_rms_norm keeps the bfloat16 input and a float32 rstd per row (2bd + 4b
    bytes) where the decomposition a CPU runs keeps float32 copies (4bd); its FLOPs follow
    the fused rules: 4 per element forward, 2 per element for the weight's gradient."""
    with torch.device("meta"):
        norm = RMSNorm(64, dtype=torch.bfloat16)
    with kernels_of("cuda"):
        fused = norm.estimate(batch=(3, 5))
    with kernels_of("cpu"):
        composite = norm.estimate(batch=(3, 5))
    batch, d_model = sympy.symbols("batch d_model")
    assert sympy.expand(fused.activation_formula) == 2 * batch * d_model + 4 * batch
    assert fused.activation_bytes == 2 * 15 * 64 + 4 * 15
    assert composite.activation_formula == 4 * batch * d_model
    assert (fused.formula, fused.backward_formula) == (4 * batch * d_model, 2 * batch * d_model)
    assert fused.uncounted == composite.uncounted == ()


def test_the_rms_norm_stand_in_computes_what_torch_does() -> None:
    """The stand-in is a real op: its values and gradients are F.rms_norm's (float64
    gradcheck), with and without a weight, over one trailing dim or two."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(
        fused_rms_norm(x, [8], w, 1e-5)[0], F.rms_norm(x, (8,), w, 1e-5), rtol=0, atol=1e-12
    )
    assert torch.autograd.gradcheck(lambda x, w: fused_rms_norm(x, [8], w, 1e-5)[0], (x, w))
    assert torch.autograd.gradcheck(lambda x: fused_rms_norm(x, [3, 8], None, None)[0], (x,))
    half = x.detach().to(torch.bfloat16)
    out, rstd = fused_rms_norm(half, [8], None, None)
    assert (out.dtype, rstd.dtype, rstd.shape) == (torch.bfloat16, torch.float32, (2, 3, 1))


LLAMA = TransformerConfig.llama(vocab=97, context=64, d_model=64, n_layers=2, n_heads=4, d_ff=160)


def test_a_plan_for_a_gpu_costs_the_gpus_kernels_on_a_cpu() -> None:
    """plan() for an H100 costs the attention kernel torch picks on sm90 (cuDNN) and the
    fused RMS norm wherever it runs: its activations are training_memory's under the
    H100's kernels, and less than a CPU's."""
    step = plan(LLAMA, 2, 32, "H100 SXM")
    assert (step.memory.kernels, step.memory.capability) == ("cuda", (9, 0))
    with torch.device("meta"):
        model = TransformerLM(LLAMA, dtype=torch.bfloat16)
    with kernels_of(resolve("H100 SXM")):
        gpu = training_memory(model, "adamw", torch.bfloat16, batch=2, seq=32)
    with kernels_of("cpu"):
        cpu = training_memory(model, "adamw", torch.bfloat16, batch=2, seq=32)
    assert step.memory.bytes == gpu.bytes
    assert gpu.bytes["activations"] < cpu.bytes["activations"]
    assert step.memory.cost.uncounted == ()


def test_a_model_on_meta_costs_a_gpus_kernels_by_default_as_the_plan_does() -> None:
    """Without kernels_of, training_memory of a model built on meta costs what plan() costs
    for its default device (a GPU's kernels), and says so; kernels= and an enclosing
    kernels_of choose otherwise."""
    step = plan(LLAMA, 2, 32)
    with torch.device("meta"):
        model = TransformerLM(LLAMA, dtype=torch.bfloat16)
    default = training_memory(model, "adamw", torch.bfloat16, batch=2, seq=32)
    assert default.bytes == step.memory.bytes and default.peak == step.memory.peak
    assert default.kernels == step.memory.kernels == "cuda"
    assert "kernels costed: a GPU's" in str(default)
    cpu = training_memory(model, "adamw", torch.bfloat16, kernels="cpu", batch=2, seq=32)
    with kernels_of("cpu"):
        enclosed = training_memory(model, "adamw", torch.bfloat16, batch=2, seq=32)
    assert cpu.bytes == enclosed.bytes != default.bytes
    assert cpu.kernels == enclosed.kernels == "cpu"
    assert step.to_dict()["kernels"] == "cuda"


def test_a_plan_for_a_cpu_costs_the_cpus_kernels() -> None:
    """A CPU's row (here with a round peak) plans with the CPU's kernels."""
    cpu = DeviceSpec("a CPU", {torch.float32: 1e12}, 1e11, "test figures", kind="cpu")
    step = plan(LLAMA, 2, 32, cpu, dtype=torch.float32)
    with torch.device("meta"):
        model = TransformerLM(LLAMA, dtype=torch.float32)
    with kernels_of("cpu"):
        expected = training_memory(model, "adamw", torch.float32, batch=2, seq=32)
    assert step.memory.bytes == expected.bytes


@torch.library.custom_op("typedflops_tests::cube", mutates_args=())
def cube(x: Tensor) -> Tensor:
    out: Tensor = x * x * x
    return out


@cube.register_fake
def _(x: Tensor) -> Tensor:
    return torch.empty_like(x)


@register_rule(cube)
def cube_flops(x: Tensor) -> int:
    return 2 * x.numel()


def _cube_backward(ctx: object, grad: Tensor) -> Tensor:
    x: Tensor = ctx.saved_tensors[0]  # type: ignore[attr-defined]
    return 3 * grad * x * x


def _cube_setup(ctx: object, inputs: tuple[Tensor], output: Tensor) -> None:
    ctx.save_for_backward(inputs[0])  # type: ignore[attr-defined]


cube.register_autograd(_cube_backward, setup_context=_cube_setup)


@typed_flops
def cubed(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    out: Tensor = cube(x)
    return out


def test_a_custom_ops_registered_backward_is_counted_by_replay() -> None:
    """A torch.library custom op with register_autograd runs under grad mode off, inside
    the autograd function torch makes for it: its backward is still replayed and counted
    (3 * grad * x * x: three multiplies per element), not listed as uncounted."""
    cost = cubed.estimate(n=10, grad=("x",))
    assert (cost.flops, cost.backward_flops) == (20, 30)
    assert cost.uncounted == ()
    no_grad = cubed.estimate(n=10)
    assert no_grad.backward_flops == 0


def test_cudnn_attention_on_meta_counts_and_keeps_what_the_kernel_does() -> None:
    """For an H100, grouped heads with a boolean mask run cuDNN's kernel on meta: its
    FLOPs are FlopCounterMode's for cuDNN attention, equal to flash's on the same shapes
    (4bhs^2d forward, 2.5x that backward: 1,879,048,192 at (4, 8, 256, 64)); it keeps its
    output, a float32 log-sum-exp per query and head, and the mask as torch hands it over
    (bfloat16, -65504 where masked out), beside the inputs."""
    from torch.utils.flop_counter import FlopCounterMode

    b, h, g, s, d = 4, 8, 2, 256, 64
    half = torch.bfloat16
    q = torch.empty(b, h, s, d, device="meta", dtype=half, requires_grad=True)
    k, v = (torch.empty(b, g, s, d, device="meta", dtype=half, requires_grad=True) for _ in "kv")
    keep = torch.ones(s, s, device="meta", dtype=torch.bool)
    saved: list[Tensor] = []

    def pack(tensor: Tensor) -> Tensor:
        saved.append(tensor)
        return tensor

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)
    with kernels_of(resolve("H100 SXM")), FlopCounterMode(display=False) as counted, hooks:
        out = kernels.attention_on_meta("cuda", (q, k, v), {"attn_mask": keep, "enable_gqa": True})
        assert type(out.grad_fn).__name__ == "ScaledDotProductCudnnAttentionBackward0"
        out.sum().backward()
    with FlopCounterMode(display=False) as flash:
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v)[0]
        out.sum().backward()
    assert counted.get_total_flops() == flash.get_total_flops() == 4 * b * h * s * s * d * 7 // 2
    assert counted.get_total_flops() == 1_879_048_192
    kept = sorted((tuple(t.shape), t.dtype) for t in saved if not any(t is x for x in (q, k, v)))
    assert kept == sorted(
        [
            ((b, h, s, d), half),  # the output
            ((b, h, s, 1), torch.float32),  # the log-sum-exp
            ((s, s), half),  # the additive mask
            ((), torch.int64),  # philox seed and offset
            ((), torch.int64),
        ]
    )


class GroupedQueryAttention(torch.nn.Module):
    """Causal self-attention whose keys and values have fewer heads than its queries
    (LLaMA 2 70B, Mistral), masked by a boolean mask it makes, as such blocks are written."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        width = d_model // n_heads * n_kv_heads
        self.q = torch.nn.Linear(d_model, d_model, bias=False, dtype=dtype)
        self.kv = torch.nn.Linear(d_model, 2 * width, bias=False, dtype=dtype)
        self.out = torch.nn.Linear(d_model, d_model, bias=False, dtype=dtype)

    @typed_flops
    def forward(self, x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq d_model"]:
        batch, seq, _ = x.shape
        q = self.q(x).view(batch, seq, self.n_heads, -1).transpose(1, 2)
        k, v = self.kv(x).view(batch, seq, 2, self.n_kv_heads, -1).permute(2, 0, 3, 1, 4)
        keep = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
        out: Tensor = self.out(y.transpose(1, 2).reshape(batch, seq, -1))
        return out


def test_a_grouped_query_block_planned_for_an_h100_keeps_no_scores() -> None:
    """Planned for an H100 (sm90), a masked grouped-query block runs cuDNN attention: no
    s x s scores per head kept (only the mask, once), FlopCounterMode's attention FLOPs
    (4bs^2d forward, 10bs^2d backward). Planned for an A100, today's choice stays: math
    (memory-efficient takes no grouped heads, flash no mask), which keeps the scores; a
    GPU of unknown capability is costed as the A100."""
    with torch.device("meta"):
        block = GroupedQueryAttention(256, 8, 2, torch.bfloat16)
    hopper, ampere, unknown = (
        training_memory(block, "adamw", torch.bfloat16, kernels=device, batch=2, seq=64)
        for device in ("H100 SXM", "A100 SXM", "cuda")
    )
    assert (hopper.capability, ampere.capability, unknown.capability) == ((9, 0), (8, 0), None)
    assert "sm90 (attention as torch picks it there: cuDNN first" in str(hopper)
    b, s = sympy.symbols("batch seq")
    d, h, g = 256, 8, 2  # the block's own sizes: the formulas are in batch and seq
    # q, the attention's output and its copy into the out projection (each 2bsd), k and v,
    # the float32 log-sum-exp, the mask in bf16 (once), philox seed and offset
    expected = (6 * d + 4 * d * g // h + 4 * h) * b * s + 2 * s**2 + 16
    assert sympy.expand(above_one(hopper.cost.activation_formula) - expected) == 0
    # at one query the attention runs as math (softmax and all): each formula has its part there
    one = training_memory(block, "adamw", torch.bfloat16, kernels="H100 SXM", batch=3, seq=1)
    for name, term in hopper.cost.terms.items():
        assert term.at({"batch": 3, "seq": 1}) == one.cost.terms[name].count, name
    # math keeps two bf16 s x s tensors per head, the scores and what it made of them
    assert sympy.expand(ampere.cost.activation_formula).coeff(b * s**2) == 2 * 2 * h
    assert hopper.bytes["activations"] < ampere.bytes["activations"]
    assert unknown.bytes == ampere.bytes
    # weights' gradients (x needs none), the out projection's input gradient, attention
    projections = (2 * d**2 + 4 * d**2 * g // h + 4 * d**2) * b * s
    attention = 10 * b * s**2 * d
    assert sympy.expand(above_one(hopper.cost.backward_formula) - projections - attention) == 0
    assert hopper.cost.matmul_formula == ampere.cost.matmul_formula
    assert hopper.cost.backward_formula != ampere.cost.backward_formula


class ChannelAttention(torch.nn.Module):
    """Attention over the pixels of a feature map, heads split out of the channels (as
    diffusion U-Nets write it): each head's dim steps over the pixels, stride x*y."""

    def __init__(self, channels: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Conv2d(channels, 3 * channels, 1)

    def forward(self, x: Float[Tensor, "b c x y"]) -> Float[Tensor, "b h xy d"]:
        q, k, v = self.qkv(x).chunk(3, dim=1)
        q, k, v = (
            t.reshape(t.shape[0], self.heads, -1, t.shape[2] * t.shape[3]).transpose(2, 3)
            for t in (q, k, v)
        )
        return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_heads_that_step_over_their_last_dim_run_math_attention(target: str) -> None:
    """Every fused kernel, a CPU's and a GPU's, needs the head dim's stride to be 1; heads
    split out of a feature map's channels step over its pixels, so torch runs math
    attention: a dry run for either device costs math (its scale, softmax and products),
    and for the CPU it is what a real run counts."""
    from typedflops import estimate, record

    model = ChannelAttention(32, 2)
    spec = Float[Tensor, "batch 32 height width"]
    with kernels_of(target):
        cost = estimate(model, spec, batch=2, height=4, width=4)
    names = {op.op for op in cost.ops}
    assert "scaled_dot_product_attention" in names
    b, h, s, d = 2, 2, 16, 16
    qkv = 2 * b * 16 * 32 * 96  # the 1x1 convolution (its bias not counted, as FlopCounterMode)
    scale = 2 * b * h * s * d  # query and key, each by the scale's square root
    products = 2 * (2 * b * h * s * s * d)  # scores, then the values mixed
    softmax = 5 * b * h * s * s
    assert cost.flops == qkv + scale + products + softmax
    if target == "cpu":
        with record() as rec:
            model(torch.randn(2, 32, 4, 4))
        assert rec.total.flops == cost.flops
        contiguous = torch.zeros(2, 2, 16, 16)
        assert torch._fused_sdp_choice(contiguous, contiguous, contiguous) == kernels._FLASH


def test_dropout_for_a_gpu_is_the_fused_kernel_with_a_boolean_mask() -> None:
    """``F.dropout`` while training: a GPU runs ``native_dropout`` (it keeps a boolean mask),
    a CPU and meta draw a mask, scale it and multiply (a float32 mask kept); both 2 FLOPs a
    value forward (the mask's multiply and the scale's) and 1 backward."""
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.1))
    costs = {}
    for target in ("cpu", "cuda"):
        with kernels_of(target):
            costs[target] = typedflops.estimate(model, Float[Tensor, "b d"], b=4, d=8)
    cpu, gpu = costs["cpu"], costs["cuda"]
    linear = 4 * 16 * (2 * 8)  # (addmm: its bias not counted)
    assert cpu.flops == gpu.flops == linear + 2 * 4 * 16
    assert cpu.backward_flops == gpu.backward_flops
    assert cpu.activation_bytes - gpu.activation_bytes == 4 * 16 * (4 - 1)  # float vs bool
    x = torch.randn(4, 16, requires_grad=True)
    with typedflops.record() as rec:
        torch.native_dropout(x, 0.1, True)
    assert (rec.total.flops, rec.total.backward_flops) == (2 * 64, 64)
