"""Costs on models written the way people write them: every formula a true function of the
dims, every count what ran (the properties in the README's "Formulas" section)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxtyping import Float, Int
from real_models import (
    GptBlock,
    MultiHeadSelfAttention,
    RMSNorm,
    SmallConvNet,
    SwiGLU,
    TransformerLM,
    attention,
)
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Cost, SpecError, record, typed_flops
from typedflops.cost.engine.recorder import Row, torch_counts
from typedflops.cost.types import above_one

torch.manual_seed(0)
LM = TransformerLM(
    vocab_size=97, context_length=128, d_model=32, num_layers=3, num_heads=4, d_ff=80
)
BLOCK = GptBlock(24, 3)
NET = SmallConvNet()


def value(formula: sympy.Expr, dims: Mapping[str, int]) -> Any:
    return formula.xreplace({sympy.Symbol(name): size for name, size in dims.items()})


def assert_true_at_own_sizes(cost: Cost) -> None:
    """formula(dims) == flops, for forward and backward; every symbol is a dim."""
    names = {str(s) for s in cost.formula.free_symbols | cost.backward_formula.free_symbols}
    assert names <= set(cost.dims), (names, cost.dims)
    assert value(cost.formula, cost.dims) == cost.flops
    assert value(cost.backward_formula, cost.dims) == cost.backward_flops
    for op in cost.ops:
        used = {str(s) for s in op.formula.free_symbols | op.backward_formula.free_symbols}
        assert used <= set(cost.dims), (op, cost.dims)


@functools.cache
def lm_cost(batch: int, seq: int) -> Cost:
    cost: Cost = TransformerLM.forward.estimate(LM, batch=batch, seq=seq)
    return cost


def test_lm_formula_reads_in_the_code_names() -> None:
    cost = lm_cost(2, 16)
    assert cost.exact
    assert_true_at_own_sizes(cost)
    names = {str(s) for s in cost.formula.free_symbols}
    # batch and seq from the annotation, vocab from the return annotation, d_model and d_ff
    # from the module's own sizes, num_layers from its count of blocks.
    assert {"batch", "seq", "vocab", "d_model", "d_ff", "num_layers"} <= names
    batch, seq = sympy.symbols("batch seq")
    quadratic = sympy.Poly(sympy.expand(above_one(cost.formula)), seq).degree()
    assert quadratic == 2  # attention scores grow with seq squared
    assert sympy.expand(cost.formula).coeff(batch) != 0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.integers(1, 5), seq=st.integers(1, 40))
def test_lm_formula_predicts_real_runs_at_other_sizes(batch: int, seq: int) -> None:
    # What a forward and backward of the model counts there, run for real (a record equals
    # the dry run where both are made: below, and at batch 1 and seq 1).
    base = lm_cost(3, 17)
    ids = torch.randint(0, 97, (batch, seq))
    with record() as rec:
        logits = LM(ids)
        logits.backward(torch.ones_like(logits))
    dims = {**base.dims, "batch": batch, "seq": seq}
    assert value(base.formula, dims) == rec.total.flops
    assert value(base.backward_formula, dims) == rec.total.backward_flops


def test_lm_formula_predicts_a_dry_run_at_batch_and_seq_one() -> None:
    base, one = lm_cost(3, 17), lm_cost(1, 1)
    dims = {**base.dims, "batch": 1, "seq": 1}
    assert value(base.formula, dims) == one.flops
    assert value(base.backward_formula, dims) == one.backward_flops


def test_lm_counts_equal_flop_counter_on_its_matmuls() -> None:
    ids = torch.randint(0, 97, (2, 16))
    with FlopCounterMode(display=False) as counter, record() as rec:
        logits = LM(ids)
    forward, backward = torch_counts(rec.session.root)
    assert forward == counter.get_total_flops()
    with FlopCounterMode(display=False) as backward_counter:
        logits.sum().backward()
    assert backward == backward_counter.get_total_flops()
    assert rec.total.flops == lm_cost(2, 16).flops


def test_torch_lowers_a_sum_over_one_element() -> None:
    one, two = lm_cost(1, 1), lm_cost(1, 2)
    assert_true_at_own_sizes(one)
    # What ran at seq=1 is what is counted: the attention-weighted sum over a single key
    # runs as an elementwise multiply (N FLOPs), not a batched matmul (2N).
    names = [op.op for op in one.ops]
    assert "einsum" in names
    # the formula for seq of 2 and up gives 3 * 32 more (3 layers, d_model); the part at 1
    # in the formula says so
    ones = {**two.dims, "seq": 1}
    assert value(above_one(two.formula), ones) - one.flops == 3 * 32
    assert value(two.formula, ones) == one.flops
    assert two.exact


def test_record_rows_and_total_are_true_at_their_sizes() -> None:
    with record() as rec:
        LM(torch.randint(0, 97, (2, 9)))
        LM(torch.randint(0, 97, (1, 5)))

    def visit(rows: list[Row]) -> int:
        count = 0
        for row in rows:
            assert_true_at_own_sizes(row.cost())
            count += 1 + visit(row.visible_children())
        return count

    assert visit(rec.calls) > 10
    total = rec.total
    assert_true_at_own_sizes(total)
    assert total.flops == lm_cost(2, 9).flops + lm_cost(1, 5).flops
    # The two calls bound batch and seq to other sizes: the total names them apart.
    assert {"batch", "batch_2", "seq", "seq_2"} <= set(total.dims)


def test_ellipsis_is_a_dim_like_any_other() -> None:
    norm = RMSNorm(16)
    with pytest.raises(SpecError, match=r"missing size for ellipsis; pass ellipsis=\.\.\."):
        RMSNorm.forward.estimate(norm, d_model=16)
    as_int = RMSNorm.forward.estimate(norm, d_model=16, ellipsis=6)
    as_tuple = RMSNorm.forward.estimate(norm, d_model=16, ellipsis=(2, 3))
    assert as_int.flops == as_tuple.flops and as_int.formula == as_tuple.formula
    assert "ellipsis" in {str(s) for s in as_int.formula.free_symbols}
    assert_true_at_own_sizes(as_tuple)
    # A leading size-1 axis inside `...` (batch 1) keeps the ellipsis factor.
    one = RMSNorm.forward.estimate(norm, d_model=16, ellipsis=(1, 7))
    assert value(as_int.formula, {**as_int.dims, "ellipsis": 7}) == one.flops


def test_optional_tensor_left_out_stays_none() -> None:
    without = attention.estimate(ellipsis=2, queries=5, keys=5, d_k=4, d_v=4)
    assert "masked_fill" not in [op.op for op in without.ops]
    assert_true_at_own_sizes(without)

    @typed_flops
    def scale(
        x: Float[Tensor, "n d"], weight: Float[Tensor, " d"] | None = None
    ) -> Float[Tensor, "n d"]:
        return x if weight is None else x * weight

    assert scale.estimate(n=3, d=4).flops == 0


def test_a_formula_over_a_module_made_of_modules() -> None:
    ffn = SwiGLU(16, 40)
    cost = SwiGLU.forward.estimate(ffn, ellipsis=(2, 5), d_model=16)
    assert cost.exact
    assert_true_at_own_sizes(cost)
    d_model, d_ff, ellipsis = sympy.symbols("d_model d_ff ellipsis")
    matmuls = 6 * ellipsis * d_model * d_ff
    assert sympy.expand(cost.formula - matmuls - 3 * ellipsis * d_ff) == 0  # sigmoid, 2 muls


def test_attention_module_builds_its_mask_inside_forward() -> None:
    module = MultiHeadSelfAttention(16, 4)
    cost = MultiHeadSelfAttention.forward.estimate(module, ellipsis=2, seq=6, d_model=16)
    assert_true_at_own_sizes(cost)
    # heads of width 1 (d_model = num_heads) run the scores' products as multiplies,
    # 2*ellipsis*seq*(4*d*d + 2*d*seq + 3*h*seq) - ellipsis*h*seq**2 FLOPs, except at one
    # position, where both are (320 ran at ellipsis 2, seq 1, d_model 4, not 328): no one
    # part at width 1 holds, so the forward is marked inexact; the backward is exact
    assert cost.backward.exact and not cost.forward.exact
    narrow = MultiHeadSelfAttention(4, 4)
    with record() as rec:
        narrow(torch.randn(2, 1, 4))
    assert rec.total.flops == 2 * 2 * (4 * 16 + 2 * 4 + 3 * 4) - 2 * 2 * 4 == 320
    other = MultiHeadSelfAttention.forward.estimate(module, ellipsis=3, seq=11, d_model=16)
    assert value(cost.formula, {**cost.dims, "ellipsis": 3, "seq": 11}) == other.flops


def test_gpt_block_with_torch_modules_and_sdpa() -> None:
    cost = GptBlock.forward.estimate(BLOCK, batch=2, seq=8, d_model=24)
    assert_true_at_own_sizes(cost)
    assert "scaled_dot_product_attention" in [op.op for op in cost.ops]
    other = GptBlock.forward.estimate(BLOCK, batch=1, seq=24, d_model=24)
    assert value(cost.formula, {**cost.dims, "batch": 1, "seq": 24}) == other.flops


def test_conv_net_formula_predicts_other_batches() -> None:
    cost = SmallConvNet.forward.estimate(NET, batch=2)
    assert_true_at_own_sizes(cost)
    for batch in (1, 5, 13):
        other = SmallConvNet.forward.estimate(NET, batch=batch)
        assert value(cost.formula, {**cost.dims, "batch": batch}) == other.flops
        assert value(cost.backward_formula, {**cost.dims, "batch": batch}) == other.backward_flops
    x = torch.randn(5, 1, 28, 28)
    with FlopCounterMode(display=False) as counter, record() as rec:
        NET(x)
    assert torch_counts(rec.session.root)[0] == counter.get_total_flops()


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 9),
    d=st.integers(1, 9),
    k=st.integers(1, 9),
    other=st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9)),
)
def test_sizes_that_coincide_and_size_one(n: int, d: int, k: int, other: tuple[int, ...]) -> None:
    @typed_flops
    def layer(
        x: Float[Tensor, "n d"], w: Float[Tensor, "d k"], b: Float[Tensor, "k"]
    ) -> Float[Tensor, "n k"]:
        return torch.relu(x @ w + b).softmax(dim=-1)

    cost = layer.estimate(n=n, d=d, k=k, grad=("w", "b"))
    assert cost.exact
    assert_true_at_own_sizes(cost)
    sizes = dict(zip(("n", "d", "k"), other, strict=True))
    again = layer.estimate(n=other[0], d=other[1], k=other[2], grad=("w", "b"))
    assert value(cost.formula, sizes) == again.flops
    assert value(cost.backward_formula, sizes) == again.backward_flops


MODULE_CONSTANT = torch.arange(64.0)


def test_a_body_that_uses_a_module_level_tensor() -> None:
    @typed_flops
    def shifted(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return x + MODULE_CONSTANT[: x.shape[0]]

    cost = shifted.estimate(n=10)
    assert cost.flops == 10
    assert str(cost.formula) == "n"


def test_declared_flops_have_one_meaning() -> None:
    @typed_flops(flops="3*batch")
    def opaque(x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]) -> Any:
        return x @ w

    @typed_flops
    def caller(x: Float[Tensor, "b d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "b k"]:
        out: Tensor = opaque(x, w)
        return out * 2

    batch = sympy.Symbol("batch")
    assert opaque.formula == 3 * batch
    assert opaque.estimate(batch=4, d_in=5, d_out=6).flops == 12
    x, w = torch.randn(4, 5), torch.randn(5, 6)
    with record() as rec:
        opaque(x, w)
    assert rec.total.flops == 12 and rec.total.formula == 3 * batch
    b, k = sympy.symbols("b k")
    assert sympy.expand(caller.estimate(b=4, d=5, k=6).formula - (3 * b + b * k)) == 0


def _check_all(costs: list[Cost]) -> None:
    for cost in costs:
        assert_true_at_own_sizes(cost)


def test_report_rows_are_true_at_their_sizes() -> None:
    from typedflops.tools.call_report import CallTally

    tally = CallTally()
    tally.start()
    try:
        LM(torch.randint(0, 97, (1, 7)))
        RMSNorm.forward(RMSNorm(8), torch.randn(3, 2, 8))
    finally:
        tally.stop()
    tally.settle()
    costs = [c for entry in tally.entries.values() for c in entry.costs.values()]
    assert all(isinstance(c, Cost) for c in costs), costs
    _check_all([c for c in costs if isinstance(c, Cost)])
    bindings = [dict(b) for entry in tally.entries.values() for b in entry.calls]
    assert any(b.get("ellipsis") == (3, 2) for b in bindings)


def _lm_call(batch: int, seq: int) -> Callable[[], Tensor]:
    ids = torch.randint(0, 97, (batch, seq))
    return lambda: LM(ids)


@dataclasses.dataclass
class TinyConfig:
    vocab_size: int = 37
    n_embd: int = 12


class ConfiguredLM(torch.nn.Module):
    """Sizes held in a config object, as many public models hold them."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = torch.nn.Embedding(config.vocab_size, config.n_embd)
        self.head = torch.nn.Linear(config.n_embd, config.vocab_size, bias=False)

    @typed_flops
    def forward(self, ids: Int[Tensor, "b t"]) -> Float[Tensor, "b t vocab"]:
        out: Tensor = self.head(self.wte(ids))
        return out


def test_sizes_in_a_config_object_name_the_formula() -> None:
    model = ConfiguredLM(TinyConfig())
    cost = model.forward.estimate(b=2, t=5)
    assert str(cost.formula) == "2*b*n_embd*t*vocab"  # the annotation's name first
    assert cost.flops == 2 * 2 * 5 * 12 * 37
