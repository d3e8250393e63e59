"""The mypy daemon gives what a cold run gives, through edits: an error introduced, an
unrelated edit, the fix, an edit in an imported module, and its revert.

The daemon keeps the plugin loaded between checks, so any cache of the plugin's that
outlives an edit shows here. To keep each check fast, the project checks against a
stand-in for torch (the plugin only needs the classes' names).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mypy_runs import PLUGIN, STRICT, run_mypy, write_torch_standin

CALLEE = """from jaxtyping import Float
from torch import Tensor


def linear(x: Float[Tensor, "b i"], w: Float[Tensor, "{w}"]) -> Float[Tensor, "b o"]:
    return x @ w
"""
CALLER = """from jaxtyping import Float
from torch import Tensor

from callee import linear


def f(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n {ret}"]:
    y = linear(x, w)
    return y
{tail}"""
# (description, callee's w dims, caller's returned dim, caller's tail, expected codes)
STEPS = [
    ("correct", "i o", "k", "", []),
    ("wrong return dims", "i o", "d", "", ["dim-alias"]),
    ("unrelated edit, error kept", "i o", "d", "# a comment\n", ["dim-alias"]),
    ("fixed", "i o", "k", "# a comment\n", []),
    ("unrelated edit", "i o", "k", "# another comment\n", []),
    # the callee's own x @ w is wrong then, and so is what the caller returns
    ("callee changed under the caller", "o i", "k", "# another comment\n", ["dim-alias"] * 2),
    ("callee reverted", "i o", "k", "# another comment\n", []),
]


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A project directory with the torch stand-in; stops the daemon when done."""
    write_torch_standin(tmp_path / "stubs")
    (tmp_path / "mypy.ini").write_text(STRICT + PLUGIN + f"mypy_path = {tmp_path / 'stubs'}\n")
    yield tmp_path
    subprocess.run(
        [sys.executable, "-m", "mypy.dmypy", "--status-file", str(tmp_path / "status"), "stop"],
        capture_output=True,
        check=False,
    )


def _daemon_check(project: Path) -> list[str]:
    command = [sys.executable, "-m", "mypy.dmypy", "--status-file", str(project / "status")]
    command += ["run", "--timeout", "120", "--", "--config-file", str(project / "mypy.ini")]
    command += ["--no-error-summary", "callee.py", "caller.py"]
    completed = subprocess.run(command, capture_output=True, text=True, cwd=project, check=False)
    assert "INTERNAL ERROR" not in completed.stdout + completed.stderr
    return sorted(line for line in completed.stdout.splitlines() if ": error:" in line)


def _cold_check(project: Path, step: int) -> list[str]:
    config = (project / "mypy.ini").read_text()
    files = [project / "callee.py", project / "caller.py"]
    run = run_mypy(files, cache_dir=project / f"cold-{step}", config=config, cwd=project)
    return sorted(line for line in run.lines if ": error:" in line)


def test_daemon_matches_cold_runs_through_edits(project: Path) -> None:
    for step, (description, w_dims, returned, tail, codes) in enumerate(STEPS):
        (project / "callee.py").write_text(CALLEE.format(w=w_dims))
        (project / "caller.py").write_text(CALLER.format(ret=returned, tail=tail))
        daemon, cold = _daemon_check(project), _cold_check(project, step)
        assert daemon == cold, f"step {step} ({description})"
        assert [line.rsplit("[", 1)[-1].rstrip("]") for line in cold] == codes, description
