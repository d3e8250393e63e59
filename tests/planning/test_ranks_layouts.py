"""Layouts beyond the ones the gloo runs cover: activation checkpointing per rank, and the
per-rank plan of a world of one against the single-device plan."""

from __future__ import annotations

import torch

from typedflops.nn import TransformerConfig
from typedflops.planning import ParallelLayout, plan, plan_parallel

CONFIG = TransformerConfig.gpt2(vocab=512, context=256, d_model=96, n_layers=4, n_heads=4)


def test_checkpointing_keeps_block_inputs_and_runs_their_forward_again() -> None:
    """Under tensor parallelism, checkpointed blocks keep their input (``2bsh`` a layer on
    every rank) and recompute during backward; forward and backward FLOPs do not change."""
    kept = plan_parallel(CONFIG, 8, 64, "H100 SXM", ParallelLayout(tp=2))
    again = plan_parallel(CONFIG, 8, 64, "H100 SXM", ParallelLayout(tp=2, checkpoint=True))
    for key in ("forward_flops", "backward_flops"):
        assert again.per_rank[key].value == kept.per_rank[key].value
    recomputed = again.per_rank["recompute_flops"]
    assert 0 < recomputed.value < kept.per_rank["forward_flops"].value
    assert recomputed.exact and again.per_rank["activation_bytes"].exact
    assert again.per_rank["activation_bytes"].value < kept.per_rank["activation_bytes"].value
    assert again.per_rank["peak_bytes"].value < kept.per_rank["peak_bytes"].value


def test_a_world_of_one_is_the_single_device_plan() -> None:
    """One rank: the same forward and backward FLOPs, activations, model states and peak as
    ``plan()`` (backward with autograd's sums of a tensor's two gradients: the residual
    stream's, a tied embedding's, in both)."""
    single = plan(CONFIG, 8, 64, "H100 SXM")
    ranked = plan_parallel(CONFIG, 8, 64, "H100 SXM", ParallelLayout(), formulas=False)
    numbers = single.to_dict()
    for key in (
        "forward_flops",
        "backward_flops",
        "activation_bytes",
        "parameter_bytes",
        "gradient_bytes",
        "optimizer_bytes",
        "master_weight_bytes",
        "peak_bytes",
    ):
        assert ranked.per_rank[key].value == numbers[key], key
    assert ranked.dtype == torch.bfloat16
