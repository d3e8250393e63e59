"""A real project's own tests: plain, under ``--typedflops``, under jaxtyping's hook.

Runs one test selection of an installed project several times in each way, interleaved
(plain, typedflops, report, jaxtyping, plain, ...) so that a noisy machine slows each
alike, and prints the median wall time of each and the ratios to plain::

    python benchmarks/real_suite.py --package linear_operator --cwd ../linear_operator \\
        --python ../venv/bin/python --repeat 5 -- test/utils/test_cholesky.py

The ways: ``plain``; ``typedflops`` (``--typedflops=PKG``); ``report`` (the same with
``--typedflops-report``, which costs each distinct call by dry runs and counts a few calls
of the functions no dry run can cost as they run); ``jaxtyping``
(``--jaxtyping-packages=PKG,beartype.beartype``).

The project and its test dependencies must be installed in the interpreter given by
``--python`` (typedflops and jaxtyping too); the selection is everything after ``--``.
Each run is a fresh ``python -m pytest`` process (``-p no:cacheprovider``, the project's
own ``addopts`` replaced by ``-q``), so import time is part of what is measured, as a user
pays it. It prints each way's pytest summary line (passed/failed counts), which the ratios
alone would hide.

On a shared machine the load changes under a run: the 1-minute load average is read
before and after each round, and a round whose load moved by more than ``--max-load-change``
is left out of the medians (its times are still printed, marked ``*``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

WAYS = {
    "plain": [],
    "typedflops": ["--typedflops={package}"],
    "report": ["--typedflops={package}", "--typedflops-report"],
    "jaxtyping": ["--jaxtyping-packages={package},beartype.beartype"],
}


def _run(python: str, cwd: Path, options: list[str], selection: list[str]) -> tuple[float, str]:
    command = [python, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=-q"]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, *options, *selection], cwd=cwd, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    summaries = [
        line for line in lines if " in " in line and ("passed" in line or "failed" in line)
    ]
    found = summaries or lines or [f"exit {done.returncode}"]
    return seconds, found[-1]


def _load() -> float:
    """The 1-minute load average (0.0 where the system does not say)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", required=True, help="the package the hooks check")
    parser.add_argument("--cwd", type=Path, default=Path.cwd(), help="the project's root")
    parser.add_argument("--python", default=sys.executable, help="its interpreter")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (one run of each way)")
    parser.add_argument("--ways", default="plain,typedflops,report,jaxtyping")
    parser.add_argument(
        "--max-load-change", type=float, default=1.0, help="leave out rounds whose load moved more"
    )
    parser.add_argument("selection", nargs="+", help="test files or node ids (after --)")
    args = parser.parse_args(argv)
    ways = [way.strip() for way in args.ways.split(",") if way.strip()]
    rounds: list[tuple[dict[str, float], float, float]] = []
    summaries: dict[str, str] = {}
    for _ in range(args.repeat):
        before = _load()
        times: dict[str, float] = {}
        for way in ways:
            options = [option.format(package=args.package) for option in WAYS[way]]
            times[way], summaries[way] = _run(args.python, args.cwd, options, args.selection)
        rounds.append((times, before, _load()))
    kept = [t for t, before, after in rounds if abs(after - before) <= args.max_load_change]
    print("round  load before -> after  " + "  ".join(f"{way:>10}" for way in ways))
    for index, (times, before, after) in enumerate(rounds):
        mark = " " if abs(after - before) <= args.max_load_change else "*"
        cells = "  ".join(f"{times[way]:10.1f}" for way in ways)
        print(f"{index + 1:5}{mark} {before:11.2f} -> {after:5.2f}  {cells}")
    print(f"{len(kept)} of {len(rounds)} rounds kept (load moved by <= {args.max_load_change})")
    medians = {way: _median([t[way] for t in kept]) for way in ways}
    plain = medians.get("plain")
    print(f"{'way':<11} {'median s':>9} {'x plain':>8}  last pytest summary")
    for way in ways:
        median = medians[way]
        if median is None:
            continue
        ratio = f"{median / plain:8.2f}" if plain else f"{'-':>8}"
        print(f"{way:<11} {median:9.1f} {ratio}  {summaries[way]}")
    theirs = medians.get("jaxtyping")
    if plain and theirs and theirs > plain:
        for way in ("typedflops", "report"):
            ours = medians.get(way)
            if ours is not None:
                print(f"{way} overhead / jaxtyping's: {(ours - plain) / (theirs - plain):.2f}")


if __name__ == "__main__":
    main()
