"""The sdist and the wheel, built as a release builds them (``python -m build``: the sdist
first, the wheel from it), hold what a user installs: the licence, the typing markers, the
einops stubs, the console script and both plugins; ``twine check`` passes on both."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel, built from a copy of the source tree (builds leave files)."""
    source = tmp_path_factory.mktemp("source") / "typedflops"
    ignored = shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "site", "*.egg-info", "__pycache__", ".*_cache"
    )
    shutil.copytree(ROOT, source, ignore=ignored)
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), "."]
    result = subprocess.run(command, capture_output=True, text=True, cwd=source)
    assert result.returncode == 0, result.stdout + result.stderr
    (sdist,) = out.glob("typedflops-*.tar.gz")
    (wheel,) = out.glob("typedflops-*.whl")
    return {"sdist": sdist, "wheel": wheel}


def test_twine_check_passes(built: dict[str, Path]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, built.values())],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2


def test_the_wheel_holds_what_users_install(built: dict[str, Path]) -> None:
    wheel = zipfile.ZipFile(built["wheel"])
    names = set(wheel.namelist())
    info = next(name.split("/")[0] for name in names if name.endswith(".dist-info/METADATA"))
    assert f"{info}/licenses/LICENSE" in names
    assert wheel.read(f"{info}/licenses/LICENSE").startswith(b"MIT License")
    assert {"typedflops/py.typed", "einops-stubs/py.typed", "einops-stubs/einops.pyi"} <= names
    assert "typedflops/mypy_plugin/__init__.py" in names
    entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    sections = dict.fromkeys(["[console_scripts]", "[pytest11]"], "")
    for block in entry_points.split("\n\n"):
        header, _, body = block.strip().partition("\n")
        sections[header] = body.strip()
    # The console script and the pytest plugin name modules the wheel holds.
    assert sections["[console_scripts]"].startswith("typedflops = typedflops.")
    assert sections["[pytest11]"].startswith("typedflops = typedflops.")
    for line in (sections["[console_scripts]"], sections["[pytest11]"]):
        module = line.split(" = ")[1].split(":")[0]
        assert f"{module.replace('.', '/')}.py" in names, module
    assert not any(name.startswith(("tests/", "docs/")) for name in names)


def test_the_metadata_says_licence_authors_and_classifiers(built: dict[str, Path]) -> None:
    wheel = zipfile.ZipFile(built["wheel"])
    (path,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    metadata = Parser().parsestr(wheel.read(path).decode())
    assert metadata["License-Expression"] == "MIT"
    assert metadata["License-File"] == "LICENSE"
    assert metadata["Author"] == "typedflops developers"
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.10" in classifiers
    assert any(c.startswith("Topic :: ") for c in classifiers)
    assert metadata["Requires-Python"] == ">=3.10"


def test_the_sdist_holds_the_sources_docs_and_tests(built: dict[str, Path]) -> None:
    with tarfile.open(built["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for name in (
        "LICENSE",
        "README.md",
        "CHANGELOG.md",
        "pyproject.toml",
        "mkdocs.yml",
        "docs/index.md",
        "tests/test_packaging.py",
        "src/typedflops/py.typed",
        "src/einops-stubs/einops.pyi",
        "src/einops-stubs/py.typed",
    ):
        assert name in names, name
