"""A real project's own tests: plain, under ``--typedflops``, under jaxtyping's hook.

Runs one test selection of an installed project several times in each of three ways,
interleaved (plain, typedflops, jaxtyping, plain, ...) so that a noisy machine slows each
alike, and prints the median wall time of each and the ratios to plain::

    python benchmarks/real_suite.py --package linear_operator --cwd ../linear_operator \\
        --python ../venv/bin/python --repeat 3 -- test/utils/test_cholesky.py

The project and its test dependencies must be installed in the interpreter given by
``--python`` (typedflops and jaxtyping too); the selection is everything after ``--``.
Each run is a fresh ``python -m pytest`` process (``-p no:cacheprovider``, the project's
own ``addopts`` replaced by ``-q``), so import time is part of what is measured, as a user
pays it. It also prints each way's pytest summary line (passed/failed counts), which the
ratios alone would hide.
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
    return seconds, (lines[-1] if lines else f"exit {done.returncode}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", required=True, help="the package the hooks check")
    parser.add_argument("--cwd", type=Path, default=Path.cwd(), help="the project's root")
    parser.add_argument("--python", default=sys.executable, help="its interpreter")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each way")
    parser.add_argument("--ways", default="plain,typedflops,jaxtyping")
    parser.add_argument("selection", nargs="+", help="test files or node ids (after --)")
    args = parser.parse_args(argv)
    ways = [way.strip() for way in args.ways.split(",") if way.strip()]
    times: dict[str, list[float]] = {way: [] for way in ways}
    summaries: dict[str, str] = {}
    for _ in range(args.repeat):
        for way in ways:
            options = [option.format(package=args.package) for option in WAYS[way]]
            seconds, summary = _run(args.python, args.cwd, options, args.selection)
            times[way].append(seconds)
            summaries[way] = summary
    plain = statistics.median(times["plain"]) if "plain" in times else None
    print(f"{'way':<11} {'median s':>9} {'x plain':>8}  runs; last pytest summary")
    for way in ways:
        median = statistics.median(times[way])
        ratio = f"{median / plain:8.2f}" if plain else f"{'-':>8}"
        runs = ", ".join(f"{t:.1f}" for t in times[way])
        print(f"{way:<11} {median:9.1f} {ratio}  {runs}; {summaries[way]}")
    if plain and "typedflops" in times and "jaxtyping" in times:
        overhead = statistics.median(times["typedflops"]) - plain
        theirs = statistics.median(times["jaxtyping"]) - plain
        if theirs > 0:
            print(f"typedflops' overhead / jaxtyping's: {overhead / theirs:.2f}")


if __name__ == "__main__":
    main()
