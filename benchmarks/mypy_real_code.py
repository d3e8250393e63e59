"""mypy on a real package, plain and with typedflops' set-up (its einops stubs and plugin):
time ratio, and every error the set-up adds or removes.

Run: ``python benchmarks/mypy_real_code.py DIR [--repeat N]``, where DIR holds a package's
sources, e.g. a clone of https://github.com/lucidrains/vit-pytorch (its ``vit_pytorch/``).
The plain run uses an interpreter that sees this environment's libraries but not typedflops'
``einops-stubs``, so einops' own hints are used; both runs use the same mypy options (untyped
functions checked, missing third-party modules ignored) and a fresh cache for the cold run.
Errors the set-up adds are split into its own diagnostics (its error codes: findings to
read) and ordinary mypy errors (which must be none).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from pathlib import Path

import typedflops

CONFIG = "[mypy]\ncheck_untyped_defs = True\nignore_missing_imports = True\n"
PLUGIN = "plugins = typedflops.mypy_plugin\n"
PLUGIN_CODES = ("pattern", "shape", "dim-alias", "flops-expr")
ERROR = re.compile(r"^(?P<where>[^:]+:\d+): error: (?P<message>.*)  \[(?P<code>[\w-]+)\]$")


def plain_python(directory: Path) -> Path:
    """An interpreter that sees this environment's libraries and typedflops, without its
    einops stubs (library paths are given as plain directories through a .pth file)."""
    venv.EnvBuilder(with_pip=False).create(directory)
    package_only = directory / "typedflops-only"
    package_only.mkdir()
    (package_only / "typedflops").symlink_to(Path(typedflops.__file__).parent)
    python = directory / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    paths = [sysconfig.get_paths()["purelib"], str(package_only)]
    (Path(site) / "libraries.pth").write_text("".join(f"{path}\n" for path in paths))
    return python


def run(target: Path, config: Path, cache: Path, python: Path | None) -> tuple[float, set[str]]:
    """Seconds of one mypy run and its errors (``file:line: [code] message``)."""
    command = [sys.executable, "-m", "mypy", "--config-file", str(config)]
    command += ["--cache-dir", str(cache), "--no-pretty", "--no-error-summary"]
    if python is not None:
        command += ["--python-executable", str(python)]
    start = time.perf_counter()
    completed = subprocess.run(
        [*command, str(target)], capture_output=True, text=True, cwd=target.parent, check=False
    )
    seconds = time.perf_counter() - start
    if "INTERNAL ERROR" in completed.stdout + completed.stderr:
        raise SystemExit(completed.stdout + completed.stderr)
    errors = set()
    for line in completed.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            errors.add(f"{match['where']}: [{match['code']}] {match['message']}")
    return seconds, errors


def main() -> None:
    """Print cold and warm times, their ratio, and the errors added or removed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", type=Path, help="a package directory to check")
    parser.add_argument("--repeat", type=int, default=1, help="cold runs per configuration")
    options = parser.parse_args()
    target = options.target.resolve()
    files = len(list(target.rglob("*.py")))
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        python = plain_python(base / "plain-env")
        configs = {"plain": (CONFIG, python), "typedflops": (CONFIG + PLUGIN, None)}
        times: dict[tuple[str, str], list[float]] = {}
        errors: dict[str, set[str]] = {}
        for round_ in range(options.repeat):
            for name, (text, interpreter) in configs.items():  # interleaved rounds
                config = base / f"{name}.ini"
                config.write_text(text)
                cache = base / f"cache-{name}-{round_}"
                cold, errors[name] = run(target, config, cache, interpreter)
                warm, _ = run(target, config, cache, interpreter)
                times.setdefault((name, "cold"), []).append(cold)
                times.setdefault((name, "warm"), []).append(warm)
    print(f"mypy on {target.name}/ ({files} files), median of {options.repeat} rounds:")
    for kind in ("cold", "warm"):
        plain, ours = times["plain", kind], times["typedflops", kind]
        ratio = statistics.median(b / a for a, b in zip(plain, ours, strict=True))
        print(
            f"  {kind}: plain {statistics.median(plain):6.2f} s, typedflops "
            f"{statistics.median(ours):6.2f} s, ratio {ratio:.2f}x (median of per-round ratios)"
        )
    added = errors["typedflops"] - errors["plain"]
    removed = errors["plain"] - errors["typedflops"]
    findings = sorted(e for e in added if any(f"[{code}]" in e for code in PLUGIN_CODES))
    ordinary = sorted(set(added) - set(findings))
    print(f"  errors: plain {len(errors['plain'])}, typedflops {len(errors['typedflops'])}")
    print(f"  added by the plugin's checks: {len(findings)}")
    for error in findings:
        print(f"    {error}")
    print(f"  ordinary mypy errors added: {len(ordinary)}; removed: {len(removed)}")
    for error in ordinary + sorted(removed):
        print(f"    {error}")


if __name__ == "__main__":
    main()
