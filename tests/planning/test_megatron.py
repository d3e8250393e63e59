"""The per-rank plan against Megatron-LM's own figures.

- Memory: GPT-3 175B (Brown et al. 2020) on 8-way tensor and 16-way pipeline parallelism with
  sequence parallelism, 8-way data parallelism with the distributed optimizer, as
  ``megatron/training/theoretical_memory_usage.py`` counts the first (most loaded) stage:
  weights and optimizer ``(12h^2 L/p + Vh)/t + (4hL + 2h)/p`` parameters at ``6 + 12/d`` bytes
  each, activations ``(34sbhL + p(8sb + sbh))/t`` (Korthikanti et al. 2022, Table 2, with
  selective recomputation, which flash attention matches: no ``as^2b`` term). Each term of
  the difference is named.
- Communication (Shoeybi et al. 2019; Korthikanti et al. 2022): tensor parallelism
  all-reduces ``bsh`` four times a layer (two forward, two backward); with sequence
  parallelism each all-reduce is a reduce-scatter and an all-gather of the same buffer.
"""

from __future__ import annotations

import dataclasses

import pytest
import sympy

from typedflops.nn import CONFIGS
from typedflops.planning import ParallelLayout, ParallelPlan, plan_parallel

#: GPT-3 175B as Megatron-LM trains it: the vocabulary padded to 51200 (a multiple of
#: 128 x t), attention and hidden dropout 0.1, micro-batch 1.
GPT3 = dataclasses.replace(CONFIGS["gpt3-175b"], vocab=51200, dropout=0.1)
T, P, D, MICRO = 8, 16, 8, 192
S, H, A, L, V = 2048, 12288, 96, 96, 51200


@pytest.fixture(scope="module")
def gpt3() -> ParallelPlan:
    layout = ParallelLayout(dp=D, zero=1, tp=T, sp=True, pp=P, microbatches=MICRO)
    return plan_parallel(GPT3, D * MICRO, S, "H100 SXM", layout)


def test_weights_and_optimizer_are_megatrons_term_by_term(gpt3: ParallelPlan) -> None:
    """Megatron-LM's parameters on the first stage, plus what its formula leaves out:
    GPT-3's biases (qkv's and the MLP's first split, the two others whole), its learned
    positions (whole on every tensor-parallel rank of the first stage), less the final
    LayerNorm, which Megatron-LM spreads over the stages and the last one holds."""
    megatron = (12 * H * H * L // P + V * H) // T + (4 * H * L + 2 * H) // P
    biases = L // P * (7 * H // T + 2 * H)
    positions = S * H
    final_norm = 2 * H // P
    held = gpt3.per_rank["parameter_bytes"].value // 2  # bf16 weights
    assert held == megatron + biases + positions - final_norm
    # Megatron-LM keeps fp32 gradients (6 + 12/d bytes a parameter with its distributed
    # optimizer); ZeRO's and torch's are bf16 (4 + 12/d): 2 bytes a parameter less. But
    # torch's embedding split by vocabulary rows gets its gradient whole on every rank
    # (DTensor's embedding backward gives a replicated gradient; a gloo run shows the same),
    # where Megatron-LM keeps it split.
    states = sum(
        gpt3.per_rank[key].value
        for key in ("parameter_bytes", "gradient_bytes", "master_weight_bytes", "optimizer_bytes")
    )
    whole_embedding_gradient = 2 * (V * H - V * H // T)
    assert states == held * (4 + 12 / D) + whole_embedding_gradient
    assert round(megatron * (6 + 12 / D) / 2**20) == 10285  # MB, as its report prints


def test_activations_are_megatrons_term_by_term(gpt3: ParallelPlan) -> None:
    """The first stage holds ``p`` microbatches in flight, each with ``L/p`` layers; what
    torch saves beyond Korthikanti et al.'s ``34sbh/t`` per layer and ``(8sb + sbh)/t`` at
    the embedding:

    - the inputs of attention's and the MLP's first matrices whole (``2sbh`` each, gathered
      along the sequence): Megatron-LM saves its shard (``2sbh/t``) and gathers it again in
      backward;
    - flash attention's log-sum-exp (fp32, ``4asb/t``) and its random-number state for
      dropout (two uint64 tensors, 24 bytes); LayerNorm's fp32 mean and rstd (``16sb/t``);
    - the token ids (int64) whole on every tensor-parallel rank (``8sb``, not ``8sb/t``) and
      the positions' indices (``8s``);
    - the stage's output, kept for its backward (``2sbh/t``).
    """
    b = 1
    megatron = (34 * S * b * H * L + P * (8 * S * b + S * b * H)) // T
    per_layer = 4 * S * b * H - 4 * S * b * H // T + 4 * A * S * b // T + 16 * S * b // T + 24
    per_microbatch = L // P * per_layer + 8 * S * b - 8 * S * b // T + 8 * S + 2 * S * b * H // T
    assert round(megatron / 2**20) == 9840  # MB, as its report prints
    assert gpt3.per_rank["activation_bytes"].value == megatron + P * per_microbatch


def test_the_activation_formula_is_in_the_models_sizes(gpt3: ParallelPlan) -> None:
    figure = gpt3.per_rank["activation_bytes"]
    assert figure.exact and figure.formula is not None
    assert {str(s) for s in figure.formula.free_symbols} >= {"batch", "seq", "d_model", "tp"}


def per_layer(plan: ParallelPlan, key: str) -> sympy.Expr:
    """What one more layer adds to a figure of the whole step, as a formula."""
    formula = plan.communication[key].formula
    assert formula is not None
    return sympy.simplify(sympy.diff(formula, sympy.Symbol("n_layers")))


@pytest.mark.parametrize("name", ["gpt2", "llama-7b"])
def test_tensor_parallel_traffic_is_four_all_reduces_of_bsh_a_layer(name: str) -> None:
    """Each layer all-reduces its ``bsh`` activations (bf16) twice forward and twice
    backward: ``8bsh`` bytes a layer. torch's SwiGLU all-reduces the gradients of its two
    column-split matrices' input apart (Megatron-LM fuses them into one matrix): one
    all-reduce more."""
    plan = plan_parallel(name, 8, 256, "H100 SXM", ParallelLayout(tp=4))
    b, s, h, pp, dp = sympy.symbols("batch seq d_model pp dp")
    all_reduces = 5 if name == "llama-7b" else 4
    assert per_layer(plan, "all_reduce/tp") == all_reduces * 2 * b * s * h / (dp * pp)


def test_sequence_parallel_traffic_is_the_same_as_reduce_scatters_and_all_gathers() -> None:
    plan = plan_parallel("llama-7b", 8, 256, "H100 SXM", ParallelLayout(tp=4, sp=True))
    b, s, h, pp, dp = sympy.symbols("batch seq d_model pp dp")
    for kind in ("reduce_scatter/tp", "all_gather/tp"):
        assert per_layer(plan, kind) == 4 * 2 * b * s * h / (dp * pp)
