"""The typed transformer parts: shapes and contracts, the named configs' sizes, and their
matrix-product FLOPs against the published closed forms (Narayanan et al. 2021, Kaplan et al.
2020) and against FlopCounterMode."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import sympy
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Cost, ShapeError, SpecError
from typedflops.cost.types import above_one
from typedflops.nn import (
    CONFIGS,
    MLP,
    Attention,
    Dropout,
    Embedding,
    LayerNorm,
    RMSNorm,
    SwiGLU,
    TransformerConfig,
    TransformerLM,
    rotary_tables,
)

B, s, l, h, V, a = sympy.symbols("B s l h V a")  # noqa: E741 (the papers' names)
#: Narayanan et al. 2021 (Megatron-LM, SC21), forward FLOPs of a GPT model's matmuls.
NARAYANAN = 24 * B * s * l * h**2 + 4 * B * s**2 * l * h + 2 * B * s * h * V
#: Our dim names for theirs; the GPT-2 shape: d_ff = 4h and n_heads * d_head = h.
OURS_AS_THEIRS = {
    "batch": B,
    "seq": s,
    "n_layers": l,
    "d_model": h,
    "vocab": V,
    "n_heads": a,
    "d_head": h / a,
    "d_ff": 4 * h,
}
SMALL_GPT2 = TransformerConfig.gpt2(vocab=97, context=32, d_model=32, n_layers=3, n_heads=4)
SMALL_LLAMA = TransformerConfig.llama(
    vocab=97, context=32, d_model=32, n_layers=3, n_heads=4, d_ff=80
)


def as_papers(formula: sympy.Expr) -> sympy.Expr:
    values = {sympy.Symbol(name): value for name, value in OURS_AS_THEIRS.items()}
    return sympy.expand(formula.xreplace(values))


def at(formula: sympy.Expr, dims: dict[str, int]) -> int:
    return int(formula.xreplace({sympy.Symbol(k): v for k, v in dims.items()}))


@functools.cache
def lm(config: TransformerConfig) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(config)


@pytest.mark.parametrize("kernel", ["sdpa", "einsum"])
def test_gpt2_matmul_flops_equal_narayanan(kernel: str) -> None:
    model = lm(dataclasses.replace(SMALL_GPT2, kernel=kernel))  # type: ignore[arg-type]
    cost = model.estimate(batch=2, seq=16)
    assert sympy.expand(as_papers(above_one(cost.matmul_formula)) - NARAYANAN) == 0
    assert cost.exact
    # At one position the einsum kernel's weighted sum over one key runs as a multiply, no
    # matrix product: the formula has its part there, and gives what ran.
    one = model.estimate(batch=2, seq=1)
    assert cost.matmul.at({**cost.dims, "seq": 1}) == one.matmul_flops


def test_narayanan_holds_under_the_math_kernel_too() -> None:
    with sdpa_kernel(SDPBackend.MATH):
        cost = lm(SMALL_GPT2).estimate(batch=2, seq=16)
    assert sympy.expand(as_papers(cost.matmul_formula) - NARAYANAN) == 0


def test_gpt3_175b_matmul_flops_equal_narayanan_at_its_size() -> None:
    model = TransformerLM(CONFIGS["gpt3-175b"], device="meta")
    cost = model.estimate(batch=1, seq=2048, dtype=torch.bfloat16)
    config = CONFIGS["gpt3-175b"]
    papers = NARAYANAN.subs({B: 1, s: 2048, l: 96, h: config.d_model, V: config.vocab})
    assert cost.matmul_flops == papers
    assert sympy.expand(as_papers(cost.matmul_formula) - NARAYANAN) == 0


def test_formulas_name_the_model_dims_and_the_layer_count() -> None:
    cost = lm(SMALL_GPT2).estimate(batch=2, seq=16)
    names = {str(symbol) for symbol in cost.matmul_formula.free_symbols}
    assert names == {"batch", "seq", "n_layers", "d_model", "n_heads", "d_head", "d_ff", "vocab"}
    for formula in (cost.formula, cost.backward_formula, cost.activation_formula):
        assert "n_layers" in {str(symbol) for symbol in formula.free_symbols}
    assert cost.dims["n_layers"] == 3


def test_loss_formulas_name_the_layer_count() -> None:
    cost = lm(SMALL_LLAMA).loss_estimate(batch=2, seq=16)
    assert "n_layers" in {str(symbol) for symbol in cost.formula.free_symbols}
    assert "n_layers" in {str(symbol) for symbol in cost.activation_formula.free_symbols}


@functools.cache
def math_estimate(config: TransformerConfig, batch: int, seq: int) -> Cost:
    with sdpa_kernel(SDPBackend.MATH):
        return TransformerLM(config, device="meta").estimate(batch=batch, seq=seq)


# No shrinking: each example is two estimates of a model; a failure prints its sizes.
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(
    layers=st.integers(1, 4),
    heads=st.sampled_from([2, 4]),
    d_head=st.sampled_from([4, 8]),
    batch=st.integers(1, 3),
    seq=st.integers(2, 12),
    llama=st.booleans(),
)
def test_formula_at_other_sizes_is_the_dry_run_there(
    layers: int, heads: int, d_head: int, batch: int, seq: int, llama: bool
) -> None:
    """On one attention kernel (which kernel SDPA takes depends on the sizes: a formula
    cannot foresee a switch), the FLOP formulas at other sizes, batch 1 among them, are what
    a dry run there counts. Activation bytes too, but not at batch 1, where torch takes
    other paths (a view where a copy was) and saves other tensors."""
    config = SMALL_LLAMA if llama else SMALL_GPT2
    base = math_estimate(config, 2, 16)
    other_config = config.resized({"n_layers": layers, "n_heads": heads, "d_head": d_head})
    other = math_estimate(other_config, batch, seq)
    dims = {**other_config.sizes, "batch": batch, "seq": seq}
    assert at(base.formula, dims) == other.flops
    assert at(base.backward_formula, dims) == other.backward_flops
    assert at(base.matmul_formula, dims) == other.matmul_flops
    if batch > 1:
        assert at(base.activation_formula, dims) == other.activation_bytes


@pytest.mark.parametrize("config", [SMALL_GPT2, SMALL_LLAMA], ids=["gpt2", "llama"])
def test_matmul_flops_match_flop_counter_forward_and_backward(config: TransformerConfig) -> None:
    model = lm(config)
    ids = torch.randint(0, config.vocab, (2, 16))
    # FlopCounterMode counts CPU flash attention as 0: both on the math path.
    with sdpa_kernel(SDPBackend.MATH):
        cost: Cost = model.estimate(batch=2, seq=16)
        with FlopCounterMode(display=False) as forward:
            logits = model(ids)
        with FlopCounterMode(display=False) as backward:
            logits.sum().backward()
    model.zero_grad(set_to_none=True)
    assert forward.get_total_flops() == cost.matmul_flops
    assert backward.get_total_flops() == 2 * cost.matmul_flops
    flash = model.estimate(batch=2, seq=16)
    assert flash.matmul_flops == cost.matmul_flops  # the fused kernel's forward: same products


def test_kaplan_and_the_six_n_rule() -> None:
    """Per token, forward matmuls are Kaplan's 2N + 2*n_layer*n_ctx*d_attn, with N the
    non-embedding parameters 12*l*h**2, plus the attention over values (which Kaplan's
    average over a causal context leaves out: 2*l*s*h) and the de-embedding 2*h*V."""
    cost = lm(SMALL_GPT2).estimate(batch=2, seq=16)
    per_token = sympy.expand(as_papers(cost.matmul_formula) / (B * s))
    non_embedding = 12 * l * h**2
    kaplan = 2 * non_embedding + 2 * l * s * h
    assert sympy.expand(per_token - kaplan - 2 * l * s * h - 2 * h * V) == 0
    step = sympy.expand(3 * per_token * B * s)
    assert (
        sympy.expand(step - 6 * non_embedding * B * s) == 12 * B * s**2 * l * h + 6 * B * s * h * V
    )


def test_named_configs_have_the_published_parameter_counts() -> None:
    from typedflops.planning.training import parameter_count

    counts = {
        name: parameter_count(TransformerLM(config, device="meta")).total
        for name, config in CONFIGS.items()
    }
    assert counts == {
        "gpt2": 124_439_808,
        "gpt2-medium": 354_823_168,
        "gpt2-large": 774_030_080,
        "gpt2-xl": 1_557_611_200,
        "gpt3-175b": 174_604_259_328,
        "llama-7b": 6_738_415_616,
    }


def test_parts_bind_their_sizes() -> None:
    with pytest.raises(ShapeError, match="d_model") as caught:
        LayerNorm(8)(torch.ones(2, 6))
    assert caught.value.dim == "d_model"
    with pytest.raises(ShapeError, match="model's context is 32"):
        lm(SMALL_GPT2)(torch.zeros(1, 33, dtype=torch.long))
    assert Embedding(10, 4)(torch.tensor([1, 2])).shape == (2, 4)
    assert RMSNorm(4)(torch.ones(3, 4)).shape == (3, 4)
    assert SwiGLU(4, 12)(torch.ones(3, 4)).shape == (3, 4)
    assert MLP(4, 16)(torch.ones(3, 4)).shape == (3, 4)
    x = torch.randn(2, 5, 16)
    torch.manual_seed(0)
    sdpa = Attention(16, 2, rope=True)
    einsum = Attention(16, 2, rope=True, kernel="einsum")
    einsum.load_state_dict(sdpa.state_dict())
    torch.testing.assert_close(sdpa(x), einsum(x))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: Attention(10, 3),
            "Attention(): d_model=10 is not a multiple of n_heads=3; give d_head",
        ),
        (
            lambda: Attention(8, 2, kernel="flash"),  # type: ignore[arg-type]
            "Attention(): kernel='flash'; choose 'sdpa' or 'einsum'",
        ),
        (lambda: Attention(12, 4, rope=True), "Attention(): RoPE needs an even d_head, got 3"),
        (
            lambda: Attention(8, 2, dropout=1.0),
            "Attention(): dropout=1.0 is not a probability in [0, 1)",
        ),
        (lambda: Dropout(1.5), "Dropout(): p=1.5 is not a probability in [0, 1)"),
        (
            lambda: TransformerConfig.gpt2(10, 8, 16, 0, 2),
            "TransformerConfig(): n_layers=0 is not a size >= 1",
        ),
        (
            lambda: TransformerConfig.gpt2(10, 8, 10, 1, 4),
            "TransformerConfig(): d_model=10 is not a multiple of n_heads=4; give d_head",
        ),
        (
            lambda: TransformerConfig.gpt2(10, 8, 16, 1, 2, norm="RMSNorm"),
            "TransformerConfig(): norm='RMSNorm' is not one of 'layernorm', 'rmsnorm'",
        ),
        (
            lambda: TransformerConfig.gpt2(10, 8, 16, 1, 2, mlp="SwiGLU"),
            "TransformerConfig(): mlp='SwiGLU' is not one of 'gelu', 'swiglu'",
        ),
        (
            lambda: TransformerConfig.gpt2(10, 8, 16, 1, 2, positions="rotary"),
            "TransformerConfig(): positions='rotary' is not one of 'learned', 'rope'",
        ),
        (
            lambda: TransformerConfig.gpt2(10, 8, 16, 1, 2, kernel="flash"),
            "TransformerConfig(): kernel='flash' is not one of 'sdpa', 'einsum'",
        ),
        (
            lambda: TransformerConfig.gpt2(10, 8, 16, 1, 2, d_ff=-64),
            "TransformerConfig(): d_ff=-64 is not a size (0: the default)",
        ),
        (
            lambda: TransformerConfig.gpt2(10, 8, 16, 1, 2, dropout=1.0),
            "TransformerConfig(): dropout=1.0 is not a probability in [0, 1)",
        ),
        (
            lambda: rotary_tables(4, 3),
            "rotary_tables(): d_head=3 must be even (pairs of axes turn)",
        ),
    ],
)
def test_bad_configs_are_named(build: object, message: str) -> None:
    """Each refusal is a SpecError (a ValueError) naming the constructor, before any work."""
    with pytest.raises(SpecError) as info:
        build()  # type: ignore[operator]
    assert str(info.value) == message
