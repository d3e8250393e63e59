"""Typing tests of typedflops.mypy_plugin: mypy runs on fixture files once per session.

Each fixture line that expects a diagnostic carries ``# E: <code> [message fragment]``; every
other line must get none. Correct fixtures (``*_ok.py``) carry no marks, so they must pass
``mypy --strict`` with the plugin untouched.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from mypy_runs import PLUGIN, ROOT, STRICT, MypyRun, shared_cache
from mypy_runs import run_mypy as run

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture_files() -> list[Path]:
    """The fixture modules (conftest.py there only keeps pytest from importing them)."""
    return sorted(path for path in FIXTURES.glob("*.py") if path.name != "conftest.py")


EXPECTATION = re.compile(r"#\s*E:\s*(?P<code>[\w-]+)(?:\s+(?P<fragment>.*?))?\s*$")


def run_mypy(cache_dir: Path, *paths: Path) -> MypyRun:
    """Run mypy --strict with the plugin (and the einops stubs installed with typedflops)."""
    return run(list(paths), cache_dir=cache_dir, config=STRICT + PLUGIN)


def expected_diagnostics() -> dict[tuple[str, int], tuple[str, str]]:
    """(fixture name, line) -> (code, message fragment) from the ``# E:`` marks."""
    expected: dict[tuple[str, int], tuple[str, str]] = {}
    for path in fixture_files():
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            match = EXPECTATION.search(text)
            if match:
                expected[path.name, number] = (match["code"], match["fragment"] or "")
    return expected


def reported_diagnostics(mypy_run: MypyRun) -> dict[tuple[str, int], list[tuple[str, str]]]:
    """(fixture name, line) -> [(code, message)] from mypy's output (notes ignored)."""
    reported: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for found in mypy_run.diagnostics:
        reported.setdefault((found.name, found.line), []).append((found.code, found.message))
    return reported


@pytest.fixture(scope="session")
def fixture_run() -> MypyRun:
    """mypy over every fixture file, once (a cold run on torch code takes ~15 s)."""
    return run_mypy(shared_cache("plugin"), *fixture_files())


def test_every_planted_error_is_reported_and_nothing_else(fixture_run: MypyRun) -> None:
    expected = expected_diagnostics()
    reported = reported_diagnostics(fixture_run)
    unexpected = [
        f"{name}:{line}: {diagnostics}"
        for (name, line), diagnostics in sorted(reported.items())
        if (name, line) not in expected
    ]
    missing = [
        f"{name}:{line}: expected [{code}] {fragment}"
        for (name, line), (code, fragment) in sorted(expected.items())
        if (name, line) not in reported
    ]
    wrong = []
    for key, (code, fragment) in sorted(expected.items()):
        diagnostics = reported.get(key, [])
        if diagnostics and (
            len(diagnostics) != 1
            or diagnostics[0][0] != code
            or not all(word in diagnostics[0][1] for word in fragment.split())
        ):
            wrong.append(f"{key[0]}:{key[1]}: expected [{code}] {fragment!r}, got {diagnostics}")
    assert not (unexpected or missing or wrong), "\n".join(
        ["unexpected:", *unexpected, "missing:", *missing, "wrong:", *wrong]
    )


def test_fixtures_cover_every_code(fixture_run: MypyRun) -> None:
    codes = {code for code, _ in expected_diagnostics().values()}
    assert {"pattern", "shape", "dim-alias", "flops-expr"} <= codes


def test_correct_fixtures_are_clean(fixture_run: MypyRun) -> None:
    clean = {path.name for path in FIXTURES.glob("*_ok.py")}
    assert clean, "no correct fixtures"
    assert not [key for key in reported_diagnostics(fixture_run) if key[0] in clean]


def test_plugin_works_from_the_cache(tmp_path: Path) -> None:
    """A warm run (dims read back from mypy's cache) reports what the cold run reported."""
    cache_dir = tmp_path / "cache"
    callee = tmp_path / "callee.py"
    callee.write_text(
        "from jaxtyping import Float\nfrom torch import Tensor\n\n\n"
        'def linear(x: Float[Tensor, "b i"], w: Float[Tensor, "i o"]) -> Float[Tensor, "b o"]:\n'
        "    return x @ w\n"
    )
    caller = tmp_path / "caller.py"
    body = (
        "from jaxtyping import Float\nfrom torch import Tensor\n\nfrom callee import linear\n\n\n"
        'def f(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n d"]:\n'
        "    return linear(x, w){}\n"
    )
    caller.write_text(body.format(""))
    cold = run_mypy(cache_dir, callee, caller)
    caller.write_text(body.format("  # edited: caller re-checked, callee read from the cache"))
    warm = run_mypy(cache_dir, callee, caller)
    for mypy_run in (cold, warm):
        found = reported_diagnostics(mypy_run).values()
        assert [code for diagnostics in found for code, _ in diagnostics] == ["dim-alias"]


def test_importing_the_plugin_does_not_import_torch() -> None:
    code = (
        "import sys, typedflops.mypy_plugin as plugin\n"
        "assert plugin.plugin('2.4.1').__name__ == 'TypedFlopsPlugin'\n"
        "roots = {'torch', 'jaxtyping', 'numpy'}\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in roots)\n"
        "print(heavy)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
