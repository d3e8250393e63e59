"""``typedflops plan`` with a parallel layout, and with a model of the user's: a JSON config
(``TransformerConfig`` fields, a Hugging Face ``config.json``) or ``package.module:factory``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from typedflops.nn import TransformerConfig
from typedflops.planning.model_source import config_from_json, resolve_model
from typedflops.tools.cli import main

TINY: dict[str, Any] = {"vocab": 96, "context": 32, "d_model": 32, "n_layers": 2, "n_heads": 4}
FIGURES = {
    "parameter_bytes",
    "gradient_bytes",
    "optimizer_bytes",
    "master_weight_bytes",
    "activation_bytes",
    "peak_bytes",
    "forward_flops",
    "backward_flops",
    "recompute_flops",
    "model_flops",
    "communication_bytes",
    "step_seconds",
}


def test_a_json_config_planned_per_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    argv = ["plan", "--model", str(path), "--batch", "8", "--seq", "32", "--json"]
    assert main([*argv, "--dp", "2", "--tp", "2", "--zero", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == "tiny"
    assert report["layout"]["world"] == 4
    assert isinstance(report["parameters"], int) and report["parameters_formula"]
    assert set(report["per_rank"]) == FIGURES
    for key in FIGURES - {"communication_bytes", "step_seconds", "peak_bytes"}:
        assert report["per_rank"][key]["formula"], key
    moved = report["per_rank"]["communication_bytes"]
    assert set(moved) == {"all_reduce/tp", "reduce_scatter/dp", "all_gather/dp"}
    assert all(entry["exact"] for entry in moved.values())


def test_the_text_report_names_the_layout_and_each_figures_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--model", "gpt2", "--batch", "8", "--seq", "128", "--pp", "2"]
    assert main([*argv, "--microbatches", "4"]) == 0
    text = capsys.readouterr().out
    assert "layout: dp 1 x tp 1 x pp 2 (1F1B, 4 microbatches); rank 0 runs the first of 2" in text
    assert "send (pp)" in text and "torch + closed form" in text
    assert "tensor-parallel and pipeline transfers wait; data-parallel ones overlap" in text


def test_hugging_face_configs() -> None:
    gpt2 = config_from_json(
        {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768,
         "n_layer": 12, "n_head": 12, "n_inner": None, "resid_pdrop": 0.1}
    )  # fmt: skip
    assert (gpt2.d_ff, gpt2.tied, gpt2.dropout, gpt2.norm) == (3072, True, 0.1, "layernorm")
    llama = config_from_json(
        {"model_type": "llama", "vocab_size": 32000, "max_position_embeddings": 2048,
         "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 32, "intermediate_size": 11008}
    )  # fmt: skip
    from typedflops.nn import CONFIGS

    assert llama == CONFIGS["llama-7b"]


_GPT2 = {"model_type": "gpt2", "vocab_size": 97, "n_positions": 64, "n_embd": 64, "n_layer": 2,
         "n_head": 4}  # fmt: skip
_LLAMA = {"model_type": "llama", "vocab_size": 97, "max_position_embeddings": 64,
          "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 128}  # fmt: skip


def test_whole_sizes_written_as_floats_are_taken() -> None:
    config = config_from_json({**_GPT2, "n_embd": 64.0, "n_inner": 256.0})
    assert (config.d_model, config.d_ff) == (64, 256)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"vocab": 8, "width": 4}, "--model: the config: unknown TransformerConfig fields width;"),
        (
            {"model_type": "llama", "vocab_size": 8, "max_position_embeddings": 8,
             "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8,
             "num_key_value_heads": 2, "intermediate_size": 128},
            "--model: the config: grouped-query attention (2 key-value heads for 8 heads) is "
            "not modelled",
        ),
        ({"model_type": "t5"}, "--model: the config: model_type 't5' is not one typedflops plans"),
        ({"model_type": "gpt2", "n_embd": 8}, "--model: the config has no vocab_size"),
        ([1, 2], "--model: the config holds list, not a JSON object"),
        # sizes as JSON writes them: never truncated (64.5 planned a d_model of 64), nor a
        # flag or a string read as one (n_layer true planned 1 layer; "abc" a traceback)
        ({**_GPT2, "n_embd": 64.5}, "--model: the config: n_embd=64.5 is not a whole number"),
        ({**_GPT2, "n_layer": True}, "--model: the config: n_layer=True is not a whole number"),
        ({**_GPT2, "n_head": "abc"}, "--model: the config: n_head='abc' is not a whole number"),
        ({**_LLAMA, "intermediate_size": [1]},
         "--model: the config: intermediate_size=[1] is not a whole number"),
        ({**_LLAMA, "num_attention_heads": 0}, "TransformerConfig(): n_heads=0 is not a size"),
    ],
)  # fmt: skip
def test_a_bad_config_is_named(data: object, reason: str) -> None:
    from typedflops import SpecError

    with pytest.raises(SpecError) as caught:
        config_from_json(data)
    assert str(caught.value).startswith(reason)


def test_a_factory_of_the_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mymodels.py").write_text(
        "from typedflops.nn import TransformerConfig, TransformerLM\n"
        "def tiny_config():\n"
        f"    return TransformerConfig(**{TINY!r})\n"
        "def tiny_model():\n"
        "    return TransformerLM(tiny_config(), device='meta')\n"
        "def not_a_model():\n"
        "    return 3\n"
        "def sized(width):\n"
        "    return tiny_config()\n"
        "def broken():\n"
        "    raise RuntimeError('no such checkpoint')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mymodels", raising=False)
    assert resolve_model("mymodels:tiny_config")[1] == TransformerConfig(**TINY)
    assert resolve_model("mymodels:tiny_model")[1] == TransformerConfig(**TINY)
    from typedflops import SpecError

    with pytest.raises(SpecError, match=r"mymodels:not_a_model\(\) returned int, not a"):
        resolve_model("mymodels:not_a_model")
    with pytest.raises(SpecError, match="cannot import 'nowhere_at_all'"):
        resolve_model("nowhere_at_all:make")
    with pytest.raises(SpecError) as caught:
        resolve_model("mymodels:sized")
    assert str(caught.value) == (
        "--model: mymodels:sized() cannot be called with no arguments "
        "(missing a required argument: 'width')"
    )
    with pytest.raises(SpecError) as caught:  # (the user's error in one line, not a traceback)
        resolve_model("mymodels:broken")
    assert str(caught.value) == (
        "--model: mymodels:broken() raised RuntimeError at mymodels.py:11: no such checkpoint"
    )


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["--sp"], "--sp splits the sequence over the tensor-parallel ranks: it needs tp > 1"),
        (["--dp", "3"], "--batch 8 does not split into --dp 3 x --microbatches 1"),
        (["--pp", "5"], "--pp 5 stages do not divide n_layers=12 blocks"),
        (["--tp", "5"], "--tp 5 does not divide n_heads=12"),
        (["--dp", "0"], "argument --dp: '0' is not a size >= 1"),
        (["--tp", "2", "--plot", "p.png"], "--plot draws one device's step: leave out the"),
    ],
)
def test_a_bad_layout_is_refused_before_any_work(
    flags: list[str],
    reason: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("a dry run started")

    monkeypatch.setattr("typedflops.planning.ranks.fit_rank", no_work)
    argv = ["plan", "--model", "gpt2", "--batch", "8", "--seq", "64", *flags]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"typedflops: error: {reason}")
