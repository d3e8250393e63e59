"""mypy on real packages, plain and with typedflops' set-up (its einops stubs and plugin):
cold and warm time ratios, and every diagnostic the set-up adds, removes or rewords.

Run: ``python benchmarks/mypy_real_code.py DIR [DIR ...] [--repeat N]``, where each DIR
holds a package's sources, e.g. a clone of https://github.com/lucidrains/vit-pytorch (its
``vit_pytorch/``). The plain run uses an interpreter that sees this environment's
libraries but not typedflops' ``einops-stubs``, so einops' own hints are used; both runs
use the same mypy options (untyped functions checked, missing third-party modules
ignored) and a fresh cache for each cold run. Rounds alternate which configuration goes
first, and each round's ratio compares the two runs of that round. Wall time and the CPU
time of the mypy process are both given: on a shared machine the CPU time is the steadier.

Diagnostics the set-up adds are split into its own (its error codes: findings to read,
and its notes) and ordinary mypy errors (which must be none); an ordinary error that
changed its wording on the same line is counted as reworded, not as added and removed.
A run that mypy stopped on a blocking error (a syntax error, a duplicate module, an
invalid package name: exit status 2) checked nothing past it; it is printed as such, never
as a clean run.
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

import typedflops

CONFIG = "[mypy]\ncheck_untyped_defs = True\nignore_missing_imports = True\n"
PLUGIN = "plugins = typedflops.mypy_plugin\n"
PLUGIN_CODES = ("pattern", "shape", "dim-alias", "flops-expr")
ERROR = re.compile(r"^(?P<where>[^:]+:\d+): error: (?P<message>.*)  \[(?P<code>[\w-]+)\]$")
NOTE = "is not jaxtyping's"  # the plugin's one note per module


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


@dataclass
class Outcome:
    """One mypy run: wall and CPU seconds, errors (``file:line: [code] message``), the
    plugin's notes."""

    seconds: float
    cpu_seconds: float
    errors: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)  # why mypy stopped, when it did


def run(target: Path, config: Path, cache: Path, python: Path | None) -> Outcome:
    """One mypy run on ``target``."""
    command = [sys.executable, "-m", "mypy", "--config-file", str(config)]
    command += ["--cache-dir", str(cache), "--no-pretty", "--no-error-summary"]
    if python is not None:
        command += ["--python-executable", str(python)]
    start, cpu_start = time.perf_counter(), _children_cpu()
    completed = subprocess.run(
        [*command, str(target)], capture_output=True, text=True, cwd=target.parent, check=False
    )
    outcome = Outcome(time.perf_counter() - start, _children_cpu() - cpu_start)
    if "INTERNAL ERROR" in completed.stdout + completed.stderr:
        raise SystemExit(completed.stdout + completed.stderr)
    for line in completed.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            outcome.errors.add(f"{match['where']}: [{match['code']}] {match['message']}")
        elif NOTE in line:
            outcome.notes.append(line)
    if completed.returncode == 2:  # mypy's status for blocking errors
        lines = (completed.stdout + completed.stderr).splitlines()
        outcome.blocking = [line for line in lines if "error:" in line] or lines[-3:]
    return outcome


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _where(error: str) -> tuple[str, str]:
    where, _, rest = error.partition(": [")
    return where, rest.partition("]")[0]


def compare(plain: set[str], ours: set[str]) -> dict[str, list[str]]:
    """The set-up's findings, and the ordinary errors it added, removed or reworded."""
    added, removed = sorted(ours - plain), sorted(plain - ours)
    findings = [e for e in added if _where(e)[1] in PLUGIN_CODES]
    ordinary = [e for e in added if e not in findings]
    removed_at = {_where(e): e for e in removed}
    reworded = [
        f"{removed_at[_where(e)]}\n      now: {e}" for e in ordinary if _where(e) in removed_at
    ]
    reworded_at = {_where(e) for e in ordinary if _where(e) in removed_at}
    return {
        "findings": findings,
        "added": [e for e in ordinary if _where(e) not in reworded_at],
        "removed": [e for e in removed if _where(e) not in reworded_at],
        "reworded": reworded,
    }


def measure(target: Path, repeat: int, base: Path, python: Path) -> None:
    """Interleaved cold and warm runs of both configurations on one package; prints them."""
    files = len(list(target.rglob("*.py")))
    configs = {"plain": (CONFIG, python), "typedflops": (CONFIG + PLUGIN, None)}
    times: dict[tuple[str, str], list[float]] = {}
    outcomes: dict[str, Outcome] = {}
    for round_ in range(repeat):
        order = list(configs) if round_ % 2 == 0 else list(reversed(configs))
        for name in order:
            text, interpreter = configs[name]
            config = base / f"{name}.ini"
            config.write_text(text)
            cache = base / f"cache-{target.name}-{name}-{round_}"
            outcomes[name] = cold = run(target, config, cache, interpreter)
            warm = run(target, config, cache, interpreter)
            times.setdefault((name, "cold"), []).append(cold.seconds)
            times.setdefault((name, "warm"), []).append(warm.seconds)
            times.setdefault((name, "cold CPU"), []).append(cold.cpu_seconds)
            times.setdefault((name, "warm CPU"), []).append(warm.cpu_seconds)
    print(f"mypy on {target.name}/ ({files} files), {repeat} rounds:")
    for kind in ("cold", "cold CPU", "warm", "warm CPU"):
        plain, ours = times["plain", kind], times["typedflops", kind]
        ratios = [b / a for a, b in zip(plain, ours, strict=True)]
        print(
            f"  {kind}: plain {statistics.median(plain):6.2f} s, typedflops "
            f"{statistics.median(ours):6.2f} s, ratio {statistics.median(ratios):.2f}x "
            f"(median of per-round ratios {', '.join(f'{r:.2f}' for r in ratios)})"
        )
    for name, outcome in outcomes.items():
        if outcome.blocking:
            print(f"  {name}: mypy STOPPED on a blocking error; the figures below are not a check")
            for line in outcome.blocking[:5]:
                print(f"    {line}")
    plain_errors, our_errors = outcomes["plain"].errors, outcomes["typedflops"].errors
    print(f"  errors: plain {len(plain_errors)}, typedflops {len(our_errors)}")
    changes = compare(plain_errors, our_errors)
    print(f"  the plugin's findings: {len(changes['findings'])}")
    for error in changes["findings"]:
        print(f"    {error}")
    notes = outcomes["typedflops"].notes
    print(f"  the plugin's notes (annotations it cannot read): {len(notes)}")
    for note in notes:
        print(f"    {note.partition(': note:')[0]}")
    for kind in ("added", "removed", "reworded"):
        print(f"  ordinary mypy errors {kind}: {len(changes[kind])}")
        for error in changes[kind]:
            print(f"    {error}")


def main() -> None:
    """Measure each package given."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("targets", type=Path, nargs="+", help="package directories to check")
    parser.add_argument("--repeat", type=int, default=1, help="cold runs per configuration")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        python = plain_python(base / "plain-env")
        for target in options.targets:
            measure(target.resolve(), options.repeat, base, python)


if __name__ == "__main__":
    main()
