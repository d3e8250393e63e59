"""Running mypy for the typing tests: with typedflops' set-up, or plain (einops' own hints,
no plugin), and reading its diagnostics.

The plain runs use an interpreter whose library paths are this environment's site-packages
(torch, jaxtyping, einops) and a directory holding only the ``typedflops`` package, so
typedflops imports but its ``einops-stubs`` are not there to be found.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path

import typedflops

ROOT = Path(__file__).resolve().parents[2]
DIAGNOSTIC = re.compile(
    r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*)  \[(?P<code>[\w-]+)\]$"
)
PLUGIN = "plugins = typedflops.mypy_plugin\n"
STRICT = "[mypy]\nstrict = True\nshow_error_codes = True\n"


_SESSION_DIR: list[Path] = []


def shared_cache(name: str) -> Path:
    """A mypy cache directory shared by this test session's runs of one configuration
    (torch is analysed once, not once per test), removed when the session ends."""
    if not _SESSION_DIR:
        _SESSION_DIR.append(Path(tempfile.mkdtemp(prefix="typedflops-mypy-")))
        atexit.register(shutil.rmtree, _SESSION_DIR[0], ignore_errors=True)
    return _SESSION_DIR[0] / name


@dataclass(frozen=True)
class Diagnostic:
    """One mypy error: file name, line, error code and message."""

    name: str
    line: int
    code: str
    message: str


@dataclass(frozen=True)
class MypyRun:
    """The outcome of one mypy run: exit status and output lines."""

    returncode: int
    lines: list[str]

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """The errors reported (notes left out)."""
        found = []
        for line in self.lines:
            match = DIAGNOSTIC.match(line)
            if match:
                name = Path(match["path"]).name
                found.append(Diagnostic(name, int(match["line"]), match["code"], match["message"]))
        return found


def run_mypy(
    paths: list[Path],
    *,
    cache_dir: Path,
    config: str,
    python: Path | None = None,
    cwd: Path = ROOT,
    config_file: Path | None = None,
) -> MypyRun:
    """Run mypy with ``config`` (an ini text; or an existing ``config_file``) on ``paths``
    in a subprocess."""
    if config_file is None:
        config_file = cache_dir.parent / f"{cache_dir.name}.ini"
        config_file.write_text(config)
    command = [sys.executable, "-m", "mypy", "--config-file", str(config_file)]
    command += ["--cache-dir", str(cache_dir), "--no-pretty", "--no-error-summary"]
    if python is not None:
        command += ["--python-executable", str(python)]
    # A failing hook raises here instead of degrading to "unknown", so tests see it.
    environment = {**os.environ, "TYPEDFLOPS_MYPY_DEBUG": "1"}
    completed = subprocess.run(
        [*command, *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        env=environment,
    )
    return MypyRun(completed.returncode, (completed.stdout + completed.stderr).splitlines())


def plain_python(
    directory: Path, extra: list[Path] | None = None, *, with_typedflops: bool = True
) -> Path:
    """An interpreter that sees this environment's libraries and typedflops (unless
    ``with_typedflops`` is False), but not the einops stubs installed with typedflops;
    ``extra`` directories are added to its library paths."""
    venv.EnvBuilder(with_pip=False).create(directory)
    package_only = directory / "typedflops-only"
    package_only.mkdir()
    if with_typedflops:
        (package_only / "typedflops").symlink_to(Path(typedflops.__file__).parent)
    python = directory / ("Scripts" if sys.platform == "win32" else "bin") / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    paths = [sysconfig.get_paths()["purelib"], str(package_only), *map(str, extra or [])]
    (Path(site) / "libraries.pth").write_text("".join(f"{path}\n" for path in paths))
    return python


# A stand-in for torch's Tensor and nn.Module: the plugin only needs the classes' names, and
# checks against it take a second instead of the ~15 s torch's own sources take.
TORCH_STANDIN = {
    "torch/__init__.pyi": "from . import nn as nn\nfrom ._tensor import Tensor as Tensor\n",
    "torch/_tensor.pyi": "class Tensor:\n    def __matmul__(self, other: Tensor) -> Tensor: ...\n",
    "torch/nn/__init__.pyi": "from .modules.module import Module as Module\n",
    "torch/nn/modules/__init__.pyi": "",
    "torch/nn/modules/module.pyi": (
        "from collections.abc import Callable\nfrom typing import Any\n\n"
        "class Module:\n    __call__: Callable[..., Any]\n"
    ),
}


def write_torch_standin(directory: Path) -> Path:
    """Write :data:`TORCH_STANDIN` under ``directory`` (a ``mypy_path`` entry); returns it."""
    for name, text in TORCH_STANDIN.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    return directory
