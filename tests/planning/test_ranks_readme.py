"""The README's worked example of a plan across GPUs: its command prints what it shows."""

from __future__ import annotations

import pytest
from readme_blocks import after

from typedflops.tools.cli import main


def test_the_worked_example_prints_what_the_readme_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = after("GPT-3 175B on 1024 H100s").text.splitlines()
    command = " ".join(line.rstrip("\\").strip() for line in shown[:2]).split()
    assert command[:2] == ["$", "typedflops"]
    assert main(command[2:]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert shown[2:] == printed[: len(shown) - 2]
