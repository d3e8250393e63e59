"""Training-step memory: activation bytes against what autograd saves on a CPU and against
Korthikanti et al. 2022 term by term; the training memory terms; the planner's command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sympy
import torch

from typedflops._cli import main
from typedflops.memory import training_memory
from typedflops.nn import TransformerConfig
from typedflops.nn.transformer import Block

b, s, h, a = sympy.symbols("batch seq d_model n_heads")
#: Korthikanti et al. 2022, eq. (1): activation bytes of one GPT layer (16-bit activations,
#: one-byte dropout masks, the attention matrix materialized).
KORTHIKANTI = s * b * h * (34 + 5 * a * s / h)


def block(dropout: float = 0.0) -> Block:
    config = TransformerConfig.gpt2(
        vocab=97, context=64, d_model=96, n_layers=1, n_heads=4, dropout=dropout
    )
    torch.manual_seed(0)
    layer = Block(config, dtype=torch.bfloat16)
    layer.train()
    return layer


def saved_bytes(module: torch.nn.Module, x: torch.Tensor) -> int:
    """Bytes of the storages autograd saves while ``module(x)`` runs (parameters and the
    input left out), each storage once."""
    left_out = {p.untyped_storage()._cdata for p in module.parameters()}
    left_out.add(x.untyped_storage()._cdata)
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in left_out:
            seen[storage._cdata] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        module(x)
    return sum(seen.values())


@pytest.mark.parametrize("seq", [16, 40])
def test_activation_bytes_are_what_autograd_saves_on_a_cpu(seq: int) -> None:
    """The estimate of a block whose input needs grad counts every storage autograd saves,
    the second LayerNorm's input among them (its first call's input was a leaf); the one
    difference is the LayerNorms' mean and rstd, float32 in the dry run (as CUDA keeps
    them) and bfloat16 on a CPU: 2 norms x 2 statistics x 2 bytes per token."""
    layer = block()
    x = torch.randn(2, seq, 96, dtype=torch.bfloat16, requires_grad=True)
    cost = layer.estimate(batch=(2,), seq=seq, grad=("x",))
    assert cost.activation_bytes - saved_bytes(layer, x) == 8 * 2 * seq


def test_a_gpt_layer_against_korthikanti_term_by_term() -> None:
    """Korthikanti's 34*s*b*h + 5*a*s**2*b for one layer, and ours (dropout 0, the fused
    attention kernel a CPU takes):
    - the layer's input (2sbh) is the previous layer's output, not this layer's activation;
    - no dropout masks at p=0 (their sbh for attention's output, sbh for the MLP's);
    - the fused kernel keeps no s*s matrix (their 5as^2b: softmax output, its dropout mask
      and the dropout's output) but a float32 log-sum-exp per row: 4abs;
    - both LayerNorms keep a float32 mean and rstd per token: 16sb."""
    cost = block().estimate(batch=(2,), seq=16, grad=("x",))
    ours = cost.activation_formula.xreplace(
        {sympy.Symbol("d_ff"): 4 * h, sympy.Symbol("d_head"): h / a}
    )
    difference = -2 * s * b * h - 2 * s * b * h - 5 * a * s**2 * b + 4 * a * s * b + 16 * s * b
    assert sympy.expand(ours - KORTHIKANTI - difference) == 0


def test_checkpointing_keeps_less_and_counts_the_recomputed_forward() -> None:
    plain = TransformerConfig.gpt2(vocab=97, context=32, d_model=32, n_layers=3, n_heads=4)
    with torch.device("meta"):
        from typedflops.nn import TransformerLM

        kept = TransformerLM(plain).estimate(batch=2, seq=16)
        redone = TransformerLM(
            TransformerConfig.gpt2(
                vocab=97, context=32, d_model=32, n_layers=3, n_heads=4, checkpoint=True
            )
        ).estimate(batch=2, seq=16)
    assert redone.activation_bytes < kept.activation_bytes
    assert kept.recompute_flops == 0
    assert 0 < redone.recompute_flops < redone.flops
    assert redone.flops == kept.flops and redone.backward_flops == kept.backward_flops


def test_training_memory_terms_per_parameter() -> None:
    from typedflops.nn import TransformerLM

    config = TransformerConfig.gpt2(vocab=64, context=8, d_model=16, n_layers=2, n_heads=2)
    model = TransformerLM(config)
    fp32 = training_memory(model, "adamw", batch=2, seq=8)
    n = fp32.parameters.trainable
    assert (fp32.bytes["parameters"], fp32.bytes["gradients"]) == (4 * n, 4 * n)
    assert fp32.bytes["optimizer"] == 8 * n and fp32.bytes["master_weights"] == 0
    mixed = training_memory(model, "adamw", torch.bfloat16, batch=2, seq=8)
    assert mixed.bytes["parameters"] + mixed.bytes["gradients"] == 4 * n
    assert mixed.bytes["optimizer"] + mixed.bytes["master_weights"] == 12 * n
    assert fp32.total == sum(v for k, v in fp32.bytes.items() if k != "total")
    with pytest.raises(ValueError, match=r"unknown optimizer 'lion'"):
        training_memory(model, "lion", batch=2, seq=8)


KEYS = (
    "forward_flops",
    "matmul_forward_flops",
    "backward_flops",
    "activation_bytes",
    "parameter_bytes",
    "total_bytes",
    "step_seconds",
)


def test_plan_json_has_the_keys_and_the_papers_matmuls(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "gpt2", "--batch", "8", "--seq", "1024", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert all(isinstance(report[key], int | float) and report[key] > 0 for key in KEYS)
    B, S, L, H, V = 8, 1024, 12, 768, 50257
    assert report["matmul_forward_flops"] == 24 * B * S * L * H**2 + 4 * B * S**2 * L * H + (
        2 * B * S * H * V
    )
    assert report["model_flops"] == 3 * report["matmul_forward_flops"]


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--model", "gpt5"], "invalid choice: 'gpt5'"),
        (["--model", "gpt2", "--device", "Z9000"], "unknown device 'Z9000'"),
        (["--model", "gpt2", "--batch", "0"], "batch=0 is not a size >= 1"),
        (["--model", "gpt2", "--seq", "4096"], "longer than gpt2's context 1024"),
    ],
)
def test_plan_refuses_bad_requests_in_one_line(
    argv: list[str], reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = {"--batch": "1", "--seq": "16"}
    for flag, value in base.items():
        if flag not in argv:
            argv = [*argv, flag, value]
    with pytest.raises(SystemExit) as stopped:
        status = main(["plan", *argv])
        raise SystemExit(status)
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert reason in err.splitlines()[-1]  # after argparse's usage lines, if any: one line


def test_plan_of_the_largest_configs_runs_on_meta_from_the_console_script() -> None:
    for model in ("gpt3-175b", "llama-7b"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "typedflops",
                "plan",
                "--model",
                model,
                "--batch",
                "1",
                "--seq",
                "2048",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        report = json.loads(done.stdout)
        assert report["parameters"] > 6e9
        # Mixed-precision AdamW holds 16 bytes per parameter: neither fits one 80 GB H100.
        assert report["total_bytes"] > 16 * report["parameters"] > 80e9
        assert report["fits"] is False
