"""Per-rank model states against ZeRO's closed forms (Rajbhandari et al. 2020, mixed-precision
Adam, K = 12): baseline 16P, stage 1 ``4P + 12P/N``, stage 2 ``2P + 14P/N``, stage 3
``16P/N``; their example of a 7.5B model on 64 GPUs; and the planner's own figures, number
and formula, at other sizes than the example's."""

from __future__ import annotations

import pytest
import sympy
import torch

from typedflops.nn import TransformerConfig
from typedflops.planning import ParallelLayout, plan_parallel, zero_states

P, N = sympy.symbols("P N")

#: A GPT-2-style model whose every parameter's first axis divides by 8, so FSDP's shards
#: are exact (no padding) on up to 8 ranks.
CONFIG = TransformerConfig.gpt2(vocab=256, context=64, d_model=64, n_layers=2, n_heads=4)


def test_zero_closed_forms_per_stage() -> None:
    totals = [zero_states(stage, P, N).total for stage in range(4)]
    assert totals == [16 * P, 4 * P + 12 * P / N, 2 * P + 14 * P / N, 16 * P / N]


def test_the_papers_example_of_a_7_5b_model_on_64_gpus() -> None:
    """Figure 1 of the paper: 120 GB, 31.4 GB, 16.6 GB and 1.9 GB per GPU."""
    gigabytes = [float(zero_states(stage, 7.5e9, 64).total) / 1e9 for stage in range(4)]
    assert [round(value, 1) for value in gigabytes] == [120.0, 31.4, 16.6, 1.9]


STATES = ("parameter_bytes", "gradient_bytes", "optimizer_bytes", "master_weight_bytes")


def model_states(plan_figures: dict[str, float]) -> float:
    return sum(plan_figures.get(key, 0) for key in STATES)


@pytest.mark.parametrize("ranks", [2, 8])
@pytest.mark.parametrize("stage", [0, 1, 2])
def test_a_ranks_model_states_are_zeros(stage: int, ranks: int) -> None:
    """bf16 weights and gradients (torch's run), fp32 master weights and Adam's two moments
    (12 bytes a parameter), sharded as the stage says: exactly ZeRO's bytes, and the sum
    of the figures' formulas is ZeRO's formula in the model's parameter formula."""
    plan = plan_parallel(CONFIG, 4 * ranks, 64, "H100 SXM", ParallelLayout(dp=ranks, zero=stage))
    figures = {key: figure.value for key, figure in plan.per_rank.items()}
    count = plan.parameters.value
    assert model_states(figures) == zero_states(stage, count, ranks).total
    formula = sympy.Integer(0)
    for key in STATES:
        found = plan.per_rank[key].formula
        assert found is not None
        formula += found
    assert plan.parameters.formula is not None
    expected = zero_states(stage, plan.parameters.formula, sympy.Symbol("dp")).total
    single = {sympy.Symbol("tp"): 1, sympy.Symbol("pp"): 1}
    assert sympy.simplify(formula.xreplace(single) - expected) == 0


@pytest.mark.parametrize("ranks", [2, 8])
def test_stage_3_is_torchs_fully_shard_with_zeros_total(ranks: int) -> None:
    """torch's ``fully_shard`` with bf16 compute keeps fp32 shards (the master weights),
    fp32 gradient shards and Adam's moments on them: 4 + 4 + 8 bytes a parameter over N,
    ZeRO's 16P/N split otherwise than ZeRO's 2 + 2 + 12."""
    plan = plan_parallel(
        CONFIG, 4 * ranks, 64, "H100 SXM", ParallelLayout(dp=ranks, zero=3), formulas=False
    )
    count = plan.parameters.value
    figures = {key: figure.value for key, figure in plan.per_rank.items()}
    assert figures["parameter_bytes"] == figures["gradient_bytes"] == 4 * count / ranks
    assert figures["optimizer_bytes"] == 8 * count / ranks
    assert "master_weight_bytes" not in figures
    assert model_states(figures) == zero_states(3, count, ranks).total


def test_data_parallel_gradient_traffic_is_megatrons() -> None:
    """A data-parallel step all-reduces the bf16 gradients: a 2P-byte buffer, of which
    each rank sends 2(n-1)/n (Narayanan et al. 2021); ZeRO stages 1 and 2 reduce-scatter
    them and gather the weights back, the same volume."""
    from typedflops.planning.collectives import bus_fraction

    for stage, kinds in ((0, ["all_reduce"]), (1, ["all_gather", "reduce_scatter"])):
        plan = plan_parallel(CONFIG, 32, 64, "H100 SXM", ParallelLayout(dp=8, zero=stage))
        count = plan.parameters.value
        moved = {key: figure.value for key, figure in plan.communication.items()}
        assert sorted(moved) == sorted(f"{kind}/dp" for kind in kinds)
        on_the_wire = sum(float(bus_fraction(kind, 8)) * moved[f"{kind}/dp"] for kind in kinds)
        assert on_the_wire == 2 * 7 / 8 * 2 * count


def test_a_plans_formulas_hold_at_other_sizes() -> None:
    """Held out: the per-rank formulas of one plan, evaluated at another batch, sequence,
    width, depth and layout, give what a plan made there gives."""
    first = plan_parallel(CONFIG, 16, 64, "H100 SXM", ParallelLayout(dp=2, tp=2, zero=1))
    other_config = TransformerConfig.gpt2(vocab=510, context=128, d_model=96, n_layers=3, n_heads=6)
    layout = ParallelLayout(dp=4, tp=3, zero=1, microbatches=2)
    other = plan_parallel(other_config, 24, 96, "H100 SXM", layout, formulas=False)
    values = {sympy.Symbol(name): size for name, size in other.dims.items()}
    for key, figure in first.per_rank.items():
        if figure.formula is None:
            continue
        assert figure.formula.xreplace(values) == other.per_rank[key].value, key
    for key, figure in first.communication.items():
        assert figure.formula is not None
        assert figure.formula.xreplace(values) == other.communication[key].value, key


def test_sixteen_bit_weights_without_master_copies() -> None:
    """float32 training keeps no master copy: Adam's moments are float32 too."""
    plan = plan_parallel(
        CONFIG, 8, 64, "H100 SXM", ParallelLayout(dp=2, zero=1), dtype=torch.float32
    )
    count = plan.parameters.value
    assert "master_weight_bytes" not in plan.per_rank
    assert plan.per_rank["optimizer_bytes"].value == 8 * count / 2
