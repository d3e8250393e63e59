"""typedflops' einops stubs ship in its wheel as the stub-only package ``einops-stubs``
(PEP 561), so a project that installs typedflops gets them with no ``mypy_path``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from mypy_runs import ROOT, STRICT, MypyRun, plain_python, run_mypy

PROJECT = """import numpy as np
from einops import einsum, parse_shape, reduce


def check(arrays: list[np.ndarray]) -> None:
    einsum(*arrays, "a b, b c -> a c")
    reveal_type(parse_shape(np.zeros((2, 3)), "a b"))
    reveal_type(reduce(np.zeros((2, 3)), "a b -> a", "sum"))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """typedflops' wheel, built from a copy of the working tree (builds leave files)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignored = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "src", source / "src", ignore=ignored)
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run([*command, "-q", "-w", str(out), str(source)], capture_output=True, check=True)
    (built,) = out.glob("typedflops-*.whl")
    return built


def test_the_wheel_holds_the_stub_package(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    stubs = {name for name in names if name.startswith("einops-stubs/")}
    assert stubs == {
        "einops-stubs/__init__.pyi",
        "einops-stubs/einops.pyi",
        "einops-stubs/packing.pyi",
        "einops-stubs/py.typed",
        "einops-stubs/layers/__init__.pyi",
        "einops-stubs/layers/torch.pyi",
    }
    assert "typedflops/py.typed" in names
    # Partial stubs: einops' modules not stubbed here keep einops' own hints.
    assert zipfile.ZipFile(wheel).read("einops-stubs/py.typed") == b"partial\n"


def _check(tmp_path: Path, python: Path) -> MypyRun:
    project = tmp_path / "project"
    project.mkdir()
    (project / "check.py").write_text(PROJECT)
    config = STRICT  # no mypy_path, no plugin: only what is installed
    return run_mypy(
        [project / "check.py"],
        cache_dir=tmp_path / "cache",
        config=config,
        python=python,
        cwd=project,
    )


def test_a_clean_project_gets_the_stubs_from_the_installed_wheel(
    wheel: Path, tmp_path: Path
) -> None:
    installed = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(installed)
    python = plain_python(tmp_path / "env", extra=[installed], with_typedflops=False)
    lines = _check(tmp_path, python).lines
    # einops' own overloads reject `*arrays`, which einops runs; the stubs take it.
    assert not [line for line in lines if ": error:" in line], lines
    assert any(':7: note: Revealed type is "dict[str, int]"' in line for line in lines), lines


def test_without_the_stubs_einops_own_hints_are_used(tmp_path: Path) -> None:
    python = plain_python(tmp_path / "env")
    lines = _check(tmp_path, python).lines
    errors = [line for line in lines if ": error:" in line]
    assert len(errors) == 1 and ':6: error: No overload variant of "einsum"' in errors[0], lines
    assert any(':7: note: Revealed type is "dict[Any, Any]"' in line for line in lines)
