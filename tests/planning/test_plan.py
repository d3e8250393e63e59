"""Step time and MFU on a device with known figures, and ``typedflops plan``: its report,
its JSON (the estimate's figures, the papers' matmuls), its refusals, and the largest
configs on meta."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sympy
import torch

from typedflops import Cost, SpecError, devices
from typedflops.devices import DeviceSpec
from typedflops.nn import CONFIGS, Block, TransformerConfig, TransformerLM
from typedflops.planning.planner import TrainingPlan, plan
from typedflops.planning.steptime import step_mfu, step_time
from typedflops.text import format_count
from typedflops.tools.cli import main

#: A device with round figures: 1 PFLOP/s in bfloat16, 1 TB/s.
FAKE = DeviceSpec(
    name="Fake", peak_flops={torch.bfloat16: 1e15}, bandwidth=1e12, source="round figures"
)
SMALL = TransformerConfig.gpt2(vocab=97, context=64, d_model=64, n_layers=3, n_heads=4)
H100_BF16 = 989.4e12  # dense bfloat16, the H100 SXM5 datasheet's 1979 TFLOPS sparse / 2
GPT2_PARAMETERS = 124_439_808


def narayanan(batch: int, seq: int, config: TransformerConfig) -> int:
    """Narayanan et al. 2021: forward matmul FLOPs of a GPT model."""
    B, s, l, h, V = batch, seq, config.n_layers, config.d_model, config.vocab  # noqa: E741
    return 24 * B * s * l * h**2 + 4 * B * s**2 * l * h + 2 * B * s * h * V


@functools.cache
def small_cost(checkpoint: bool = False) -> tuple[TransformerLM, Cost]:
    config = dataclasses.replace(SMALL, checkpoint=checkpoint)
    model = TransformerLM(config, device="meta", dtype=torch.bfloat16)
    return model, model.loss_estimate(batch=2, seq=32)


@functools.cache
def gpt2_plan() -> TrainingPlan:
    return plan("gpt2", batch=8, seq=1024, device="H100 SXM")


def test_step_time_at_an_mfu_and_its_roofline_bound() -> None:
    """At an MFU, the time of PaLM's model FLOPs (3x the forward's matmuls) at that share of
    the peak; the bound, the step's FLOPs at the peak or its least traffic (parameters read
    twice, gradients written, saved activations written and read) at the bandwidth."""
    _, cost = small_cost()
    timing = step_time(
        cost, FAKE, torch.bfloat16, mfu=0.5, parameter_bytes=1000, gradient_bytes=600
    )
    flops = cost.flops + cost.backward_flops
    assert timing.step_flops == flops
    assert timing.model_flops == 3 * cost.matmul_flops
    assert timing.seconds == timing.model_flops / (0.5 * 1e15)
    assert timing.step_bytes == 2 * 1000 + 600 + 2 * cost.activation_bytes
    assert timing.unfused_bytes == 3 * cost.bytes
    assert timing.roofline_seconds == max(flops / 1e15, timing.step_bytes / 1e12)
    slow = dataclasses.replace(FAKE, bandwidth=1e6)
    memory_bound = step_time(cost, slow, torch.bfloat16)
    assert memory_bound.bound == "memory"
    assert memory_bound.roofline_seconds == 2 * cost.activation_bytes / 1e6
    no_bandwidth = step_time(cost, dataclasses.replace(FAKE, bandwidth=None), torch.bfloat16)
    assert (no_bandwidth.bound, no_bandwidth.roofline_seconds) == ("compute", flops / 1e15)


def test_step_time_on_a_device_of_the_table() -> None:
    _, cost = small_cost()
    timing = step_time(cost, "H100 SXM", torch.bfloat16, mfu=0.4)
    spec = devices.lookup("H100 SXM")
    assert spec is not None and timing.device == spec.name == "H100 SXM5 80GB"
    assert timing.peak_flop_per_sec == spec.peak_flops[torch.bfloat16] == H100_BF16
    assert timing.bandwidth == 3.35e12
    assert timing.seconds == timing.model_flops / (0.4 * H100_BF16)
    with pytest.raises(SpecError, match="unknown device 'Z9000'"):
        step_time(cost, "Z9000")
    with pytest.raises(SpecError, match=r"mfu=0 must be in \(0, 1\]"):
        step_time(cost, "H100 SXM", mfu=0)


def test_mfu_counts_model_flops_not_the_recomputed_ones() -> None:
    """PaLM's MFU: with checkpointing the step runs more FLOPs (the blocks' forward again),
    but its model FLOPs, and so the MFU of a step that took as long, are the same."""
    _, plain = small_cost()
    _, redone = small_cost(checkpoint=True)
    fast = step_time(plain, FAKE, torch.bfloat16)
    slow = step_time(redone, FAKE, torch.bfloat16)
    assert slow.step_flops == fast.step_flops + redone.recompute_flops
    assert slow.model_flops == fast.model_flops
    measured = 2e-6
    mfu = step_mfu(redone, measured, FAKE, torch.bfloat16)
    assert mfu == step_mfu(plain, measured, FAKE, torch.bfloat16)
    assert mfu == 3 * plain.matmul_flops / measured / 1e15
    with pytest.raises(SpecError, match=r"MFU \d+\.\d\d is above 1: the peak"):
        step_mfu(plain, 1e-12, FAKE, torch.bfloat16)
    with pytest.raises(SpecError, match="seconds=0 must be positive"):
        step_mfu(plain, 0, FAKE, torch.bfloat16)


def test_a_step_is_three_forwards_of_matmuls_and_four_with_recomputation() -> None:
    """Backward's matmuls are twice the forward's (a gradient for the input and one for
    the weight), so a step is 3M; recomputation runs every block's forward again up to the
    last tensor it saves (torch's early stop): all but its MLP's second product (whose
    inputs are saved before it runs) and the two adds after it. So the matmuls of a step
    are 4M less the head's 2BshV and L of those products: 4M - 2BshV - 2BshLd_ff."""
    _, cost = small_cost()
    with torch.device("meta"):
        block = Block(SMALL, dtype=torch.bfloat16).estimate(batch=2, seq=32)
    b, s, h, V, L, f = sympy.symbols("batch seq d_model vocab n_layers d_ff")
    matmuls = cost.matmul_formula
    assert sympy.expand(matmuls - L * block.matmul_formula) == 2 * b * s * h * V
    _, redone = small_cost(checkpoint=True)
    tail = 2 * b * s * f * h + 2 * b * s * h
    assert sympy.expand(redone.recompute_formula - L * (block.formula - tail)) == 0
    assert redone.recompute.exact
    assert redone.recompute_flops == 3 * (block.flops - 2 * 2 * 32 * (256 * 64 + 64))


def test_the_report_has_its_sections_and_the_papers_figures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    figure = tmp_path / "plan.png"
    argv = ["plan", "--model", "gpt2", "--batch", "8", "--seq", "1024", "--plot", str(figure)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    step = gpt2_plan()
    assert out == step.text() + f"\nplot written to {figure}\n"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = out.splitlines()
    assert lines[0] == (
        "gpt2 (GPT-2 style: 12 layers, d_model 768, 12 heads of 64, d_ff 3072, vocab 50257; "
        "124M parameters)"
    )
    assert lines[1] == "one step: batch 8 x seq 1024, bfloat16, adamw, on H100 SXM5 80GB"
    matmuls = narayanan(8, 1024, CONFIGS["gpt2"])
    # Table rows by their label: two spaces or more part the columns.
    rows = {
        re.split(r"\s{2,}", line.strip())[0]: re.split(r"\s{2,}", line.strip())[1:]
        for line in lines
        if "  " in line.strip()
    }
    assert rows["matmuls"][0] == format_count(matmuls)
    assert rows["model FLOPs"][0] == format_count(3 * matmuls)
    assert rows["parameters"][0] == f"{2 * GPT2_PARAMETERS / 1e9:.2f}"
    assert rows["optimizer"][0] == f"{8 * GPT2_PARAMETERS / 1e9:.2f}"
    assert rows["master weights"][0] == f"{4 * GPT2_PARAMETERS / 1e9:.2f}"
    assert rows["peak"] == [
        f"{step.memory.peak / 1e9:.2f}",
        "allocation by allocation, steady state",
    ]
    # What the peak assumes and the kernels costed, in words.
    prose = " ".join(line.strip() for line in lines)
    assert "peak: the most held at once, from the second step on (the optimizer's state" in prose
    assert (
        "kernels costed: a GPU's, sm90 (attention as torch picks it there: cuDNN first on sm90"
        in prose
    )
    fits = f"fits in H100 SXM5 80GB's 80.00 GB: yes (peak {step.memory.peak / 80e9:.0%} of it)"
    assert fits in lines
    seconds = 3 * matmuls / (0.4 * H100_BF16)
    assert any(line.startswith(f"step time: at 40% MFU {seconds * 1e3:.3g} ms; ") for line in lines)
    assert any(line.startswith("traffic: at least ") for line in lines)
    # Every line fits 100 columns (a longer one goes on, indented, on the next), the
    # formulas too; each formula, its wrapped lines joined, is the figure's.
    first = next(i for i, line in enumerate(lines) if line.startswith("formulas, in "))
    start = next(i for i in range(first, len(lines)) if lines[i].endswith(":")) + 1
    header = " ".join(line.strip() for line in lines[first:start])
    shown = "vocab=50257, context=1024, d_model=768, n_heads=12, d_head=64, d_ff=3072"
    assert header == f"formulas, in {shown}, n_layers=12, batch=8, seq=1024:"
    formulas: dict[str, str] = {}
    for line in lines[start:-1]:  # the last: the plot's path
        if line.startswith("      "):
            formulas[list(formulas)[-1]] += " " + line.strip()
        else:
            label, formula = line.strip().split(": ")
            formulas[label] = formula
    assert list(formulas) == [
        "forward FLOPs",
        "matmul FLOPs",
        "backward FLOPs",
        "parameters",
        "activation bytes",
        "total bytes",
    ]
    matmul_formula = sympy.sympify(formulas["matmul FLOPs"])
    assert sympy.expand(matmul_formula - step.memory.cost.matmul_formula) == 0
    assert max(len(line) for line in lines) <= 100


KEYS = (
    "forward_flops",
    "matmul_forward_flops",
    "backward_flops",
    "activation_bytes",
    "parameter_bytes",
    "total_bytes",
    "step_seconds",
)


def test_the_json_holds_the_estimates_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "gpt2", "--batch", "8", "--seq", "1024", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    step = gpt2_plan()
    cost, memory = step.memory.cost, step.memory
    assert {key: report[key] for key in KEYS} == {
        "forward_flops": cost.flops,
        "matmul_forward_flops": cost.matmul_flops,
        "backward_flops": cost.backward_flops,
        "activation_bytes": memory.bytes["activations"],
        "parameter_bytes": memory.bytes["parameters"],
        "total_bytes": memory.total,
        "step_seconds": step.time.seconds,
    }
    assert report == step.to_dict()
    # The figures against what they are by definition.
    n = GPT2_PARAMETERS
    assert report["matmul_forward_flops"] == narayanan(8, 1024, CONFIGS["gpt2"])
    assert (report["parameter_bytes"], report["gradient_bytes"]) == (2 * n, 2 * n)
    assert (report["optimizer_bytes"], report["master_weight_bytes"]) == (8 * n, 4 * n)
    terms = ("parameter", "gradient", "optimizer", "master_weight", "activation")
    assert report["total_bytes"] == sum(report[f"{term}_bytes"] for term in terms)
    held = 14 * n  # parameters, AdamW's two fp32 moments, fp32 master weights
    assert report["peak_bytes"] == held + max(report["forward_backward_bytes"], 6 * n)
    assert report["model_flops"] == 3 * report["matmul_forward_flops"]
    assert report["step_seconds"] == report["model_flops"] / (0.4 * H100_BF16)
    assert report["fits"] is True and report["device_memory_bytes"] == 80 * 10**9
    assert (report["kernels"], report["capability"]) == ("cuda", [9, 0])  # the H100's
    at_dims = {sympy.Symbol(name): size for name, size in report["dims"].items()}
    for key in ("forward_flops", "backward_flops", "activation_bytes", "total_bytes"):
        formula = sympy.sympify(report["formulas"][key])
        assert formula.xreplace(at_dims) == report[key], key


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (
            ["--model", "gpt5"],
            "argument --model: 'gpt5' is no model: one of gpt2, gpt2-medium, gpt2-large, gpt2-xl, "
            "gpt3-175b, llama-7b, a JSON config file, or package.module:factory",
        ),
        (
            ["--model", "gpt2", "--device", "Z9000"],
            "--device 'Z9000' is not in the device table (`typedflops devices` lists it); "
            'known: "H100 SXM5 80GB", ',
        ),
        (["--model", "gpt2", "--device", "T4"], "--device 'T4': T4 has no bfloat16 peak in "),
        (["--model", "gpt2", "--batch", "0"], "argument --batch: '0' is not a size >= 1"),
        (["--model", "gpt2", "--seq", "4096"], "--seq 4096 is longer than gpt2's context 1024"),
        (
            ["--model", "gpt2", "--optimizer", "lion"],
            "argument --optimizer: invalid choice: 'lion' (choose from 'adamw', 'adam', ",
        ),
        (
            ["--model", "gpt2", "--mfu", "1.5"],
            "argument --mfu: '1.5' is not a fraction in (0, 1], e.g. 0.4",
        ),
        (["--model", "gpt2", "--peak", "fast"], "argument --peak: 'fast' is not a number of "),
        (["--model", "gpt2", "--plot", "p.txt"], "--plot p.txt: matplotlib cannot write 'txt'"),
    ],
)
def test_a_bad_request_is_refused_in_one_line_before_any_work(
    argv: list[str],
    reason: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("a dry run started")

    monkeypatch.setattr("typedflops.planning.planner.training_memory", no_work)
    sizes = [flag for flag in ("--batch", "--seq") if flag not in argv]
    assert main(["plan", *argv, *(part for flag in sizes for part in (flag, "16"))]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"typedflops: error: {reason}")
    assert "plan()" not in captured.err and "tokens" not in captured.err


def test_llama_7b_runs_on_meta(capsys: pytest.CaptureFixture[str]) -> None:
    config = CONFIGS["llama-7b"]
    assert main(["plan", "--model", "llama-7b", "--batch", "1", "--seq", "2048", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    n = report["parameters"]
    assert n == 6_738_415_616
    # The matmuls: Narayanan's attention and head, the SwiGLU's three projections of d_ff.
    h, s, f = config.d_model, 2048, config.d_ff
    per_layer = 8 * s * h**2 + 4 * s**2 * h + 6 * s * h * f
    assert report["matmul_forward_flops"] == 32 * per_layer + 2 * s * h * config.vocab
    assert report["parameter_bytes"] + report["optimizer_bytes"] == 10 * n
    assert report["fits"] is False and report["peak_bytes"] > 16 * n > 80 * 10**9


GPT3_ARGS = ("plan", "--model", "gpt3-175b", "--batch", "1", "--seq", "2048", "--json")


def test_gpt3_175b_runs_on_meta_from_the_console() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "typedflops", *GPT3_ARGS],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(done.stdout)
    n = report["parameters"]
    assert n == 174_604_259_328
    assert report["matmul_forward_flops"] == narayanan(1, 2048, CONFIGS["gpt3-175b"])
    assert report["model_flops"] == 3 * report["matmul_forward_flops"]
    assert report["total_bytes"] - report["activation_bytes"] == 16 * n
    assert report["fits"] is False and report["bound"] == "compute"


_TARGETS_TAKEN = [
    "nll_loss: every target counted, as if none equals ignore_index",
    "nll_loss backward: every target counted, as if none equals ignore_index",
]


def test_a_plan_says_what_its_flops_take_as_given_as_its_estimate_does() -> None:
    # The step's loss (cross-entropy, nll_loss) skips targets equal to ignore_index; a plan
    # has no targets' values, so it counts every one, and says so as its estimate does.
    from typedflops.planning import plan_parallel
    from typedflops.planning.layout import ParallelLayout

    config = TransformerConfig.gpt2(vocab=512, context=64, d_model=64, n_layers=2, n_heads=4)
    step = plan(config, batch=2, seq=16, device="H100 SXM")
    assert list(step.memory.cost.assumed) == _TARGETS_TAKEN
    report = step.to_dict()
    assert (report["assumed"], report["uncounted"]) == (_TARGETS_TAKEN, [])
    lines = step.text().splitlines()
    after = lines.index(next(line for line in lines if line.startswith("model FLOPs")))
    assert lines[after + 1 : after + 3] == [f"  values not known: {n}" for n in _TARGETS_TAKEN]
    ranks = plan_parallel(config, 4, 16, "H100 SXM", ParallelLayout(dp=2), formulas=False)
    assert (ranks.to_dict()["assumed"], list(ranks.uncounted)) == (_TARGETS_TAKEN, [])
    assert [f"  values not known: {n}" for n in _TARGETS_TAKEN] == [
        line for line in ranks.text().splitlines() if line.startswith("  values not known")
    ]
