"""mypy's time on examples/ with and without typedflops.mypy_plugin, cold and warm cache.

Run: ``python benchmarks/mypy_plugin.py [--repeat N]``. Cold = a fresh cache directory;
warm = the same command again on that cache. Target: plugin/plain <= 1.3 cold.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mypy_seconds(plugin: bool, cache_dir: Path, targets: list[Path]) -> float:
    """Wall time of one mypy --strict run (a subprocess, as a user or editor runs it)."""
    config = cache_dir.with_suffix(".ini")
    lines = ["[mypy]", "strict = True"]
    if plugin:
        lines.append("plugins = typedflops.mypy_plugin")
    config.write_text("\n".join(lines) + "\n")
    command = [sys.executable, "-m", "mypy", "--config-file", str(config)]
    command += ["--cache-dir", str(cache_dir), *map(str, targets)]
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, cwd=ROOT, check=False)
    return time.perf_counter() - start


def main() -> None:
    """Print median cold and warm times with and without the plugin, and their ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration")
    repeat = parser.parse_args().repeat
    targets = sorted((ROOT / "examples").glob("*.py")) or sorted(
        (ROOT / "tests" / "typing" / "fixtures").glob("*_ok.py")
    )
    print(f"mypy --strict on {len(targets)} files ({targets[0].parent.relative_to(ROOT)}/)")
    medians: dict[tuple[bool, str], float] = {}
    for plugin in (False, True):
        cold, warm = [], []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                cache_dir = Path(tmp) / "cache"
                cold.append(mypy_seconds(plugin, cache_dir, targets))
                warm.append(mypy_seconds(plugin, cache_dir, targets))
        medians[plugin, "cold"] = statistics.median(cold)
        medians[plugin, "warm"] = statistics.median(warm)
    for kind in ("cold", "warm"):
        plain, with_plugin = medians[False, kind], medians[True, kind]
        print(
            f"{kind}: without plugin {plain:6.2f} s, with plugin {with_plugin:6.2f} s,"
            f" ratio {with_plugin / plain:.2f}x"
        )


if __name__ == "__main__":
    main()
