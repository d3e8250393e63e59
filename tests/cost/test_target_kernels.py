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

from typedflops import register_rule, typed_flops
from typedflops.cost.engine import kernels
from typedflops.cost.engine.kernels import kernels_of
from typedflops.cost.engine.stand_ins import fused_rms_norm
from typedflops.devices import DeviceSpec
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
    """torch's order on an sm80+ GPU: flash (16-bit, no mask, equal head sizes <= 256),
    memory-efficient (float32 or 16-bit, head sizes aligned to 4 or 8 elements, no grouped
    query heads), math; a backend whose flag is off is passed over."""
    codes = {"flash": kernels._FLASH, "efficient": kernels._EFFICIENT, "math": kernels._MATH}
    assert kernels._gpu_choice(dtype, heads, masked, grouped, flags) == codes[expected]


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
    log-sum-exp per query and head. float32: the memory-efficient kernel, the same FLOPs and
    a float32 output. With only math allowed: the s x s matrices are kept and the softmax
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
    assert sympy.expand(flash.activation_formula) == 2 * b * h * s * d + 4 * b * h * s
    assert sympy.expand(efficient.activation_formula) == 4 * b * h * s * d + 4 * b * h * s
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
    """plan() for an H100 costs flash attention and the fused RMS norm wherever it runs:
    its activations are training_memory's under the CUDA kernels, and less than a CPU's."""
    step = plan(LLAMA, 2, 32, "H100 SXM")
    with torch.device("meta"):
        model = TransformerLM(LLAMA, dtype=torch.bfloat16)
    with kernels_of("cuda"):
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
