"""The README followed literally: every Python block runs as shown, in a fresh process.

Blocks that are files of the "In your tests" layout (their first line names the file) are run
by the pytest plugin's tests instead (``test_pytest_plugin.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from readme_blocks import Block, blocks

SCRIPTS = [block for block in blocks("python") if not block.path]


def test_the_readme_has_the_blocks_it_promises() -> None:
    assert [block.path for block in blocks("python") if block.path] == [
        "mypkg/model.py",
        "tests/test_model.py",
    ]
    assert len(SCRIPTS) == 3 and "ShapeError" in SCRIPTS[0].text
    assert "typedflops.estimate(lm" in SCRIPTS[1].text
    assert "typedflops.planning" in SCRIPTS[2].text
    setup = blocks("bash")[0].text.splitlines()
    assert setup[0] == "python3 -m venv .venv && . .venv/bin/activate"
    assert "--index-url https://download.pytorch.org/whl/cpu" in setup[1]
    assert setup[2:] == ['pip install -e ".[dev]" && typedflops demo', "pytest"]


@pytest.mark.parametrize("block", SCRIPTS, ids=[f"line{block.line}" for block in SCRIPTS])
def test_python_block_runs_as_a_script(block: Block, tmp_path: Path) -> None:
    result = _run(block, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_the_tour_prints_what_its_comments_say(tmp_path: Path) -> None:
    tour = SCRIPTS[0]
    result = _run(tour, tmp_path)
    assert result.returncode == 0, result.stderr
    shown = [
        line.removeprefix("# ")
        for line in tour.text.splitlines()
        if line.startswith(("# ShapeError", "#   "))
    ]
    lines = result.stdout.splitlines()
    assert lines[: len(shown)] == shown
    assert lines[len(shown)] == "2*batch*d_in*d_out"
    assert lines[len(shown) + 1].split()[:2] == [str(2 * 16384 * 32768 * 8192)] * 2


def test_the_untyped_estimate_prints_what_its_comments_say(tmp_path: Path) -> None:
    result = _run(SCRIPTS[1], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["77194752*batch*seq", "True"]


def _run(block: Block, directory: Path) -> subprocess.CompletedProcess[str]:
    script = directory / "block.py"
    script.write_text(block.text)
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=directory, timeout=300
    )
