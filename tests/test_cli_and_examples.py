"""The console script and the examples run, at CPU sizes, and print what they promise."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from typedflops.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("ex*.py"))


def test_demo_prints_formulas_and_mfu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "ShapeError: linear(): argument 'w' has shape (600, 10)" in out
    assert "2*batch*d_in*d_out" in out
    assert "2*batch*d_hidden*(d_in + d_out)" in out
    assert "MFU" in out


def test_demo_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "roofline.png"
    assert main(["demo", "--quick", "--plot", str(target)]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_devices_lists_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "H100 SXM5" in out and "989.4" in out
    assert "this machine's device:" in out


def test_console_script_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "typedflops", "demo", "--quick"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "TwoLayerMLP(D, D, K)" in result.stdout


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if "quick" in module.main.__code__.co_varnames:
        module.main(quick=True)
    else:
        module.main()
    assert capsys.readouterr().out.strip()


def test_there_is_one_example_per_topic() -> None:
    # The lecture's five topics, and a transformer LM written with plain modules.
    assert len(EXAMPLES) == 6
