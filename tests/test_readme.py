"""The README followed literally: every Python block runs as shown, in a fresh process
(its commands and their output are run by ``test_docs.py``, as every page's are)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import Block, blocks

SCRIPTS = [block for block in blocks("python") if not block.path]


def test_the_readme_has_the_blocks_it_promises() -> None:
    assert not [block.path for block in blocks("python") if block.path]
    assert len(SCRIPTS) == 1 and "ShapeError" in SCRIPTS[0].text
    (plan,) = [block for block in blocks("bash") if block.text.startswith("typedflops plan")]
    assert plan.output is not None and "fits in H100 SXM5 80GB's 80.00 GB: yes" in plan.output
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


def _run(block: Block, directory: Path) -> subprocess.CompletedProcess[str]:
    script = directory / "block.py"
    script.write_text(block.text)
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=directory, timeout=300
    )
