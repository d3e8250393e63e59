"""Real-code corpus: files reduced from the patterns of public repositories (written here,
not copied) are checked by plain mypy and by mypy with typedflops' set-up (its einops stubs
and plugin). On correct code the two must agree line for line; every planted bug
(``# BUG: <code> <fragment>``) must be caught by the set-up."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy_runs import PLUGIN, Diagnostic, plain_python, run_mypy

CORPUS = Path(__file__).resolve().parent / "corpus"
# Strict, except that untyped code (common in research repositories) is still checked
# rather than rejected.
CONFIG = (
    "[mypy]\nstrict = True\nshow_error_codes = True\ndisallow_untyped_defs = False\n"
    "disallow_incomplete_defs = False\ndisallow_untyped_calls = False\n"
)
BUG = re.compile(r"#\s*BUG:\s*(?P<code>[\w-]+)(?:\s+(?P<fragment>.*?))?\s*$")


def corpus_files() -> list[Path]:
    return sorted(path for path in CORPUS.glob("*.py") if path.name != "conftest.py")


def planted() -> dict[tuple[str, int], tuple[str, str]]:
    """(file, line) -> (code, message fragment) of every planted bug."""
    found: dict[tuple[str, int], tuple[str, str]] = {}
    for path in corpus_files():
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            match = BUG.search(text)
            if match:
                found[path.name, number] = (match["code"], match["fragment"] or "")
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """(plain mypy's errors, errors with typedflops' set-up) over the corpus."""
    base = tmp_path_factory.mktemp("corpus")
    python = plain_python(base / "plain-env")
    plain = run_mypy(corpus_files(), cache_dir=base / "plain", config=CONFIG, python=python)
    ours = run_mypy(corpus_files(), cache_dir=base / "ours", config=CONFIG + PLUGIN)
    assert not [line for line in plain.lines + ours.lines if "INTERNAL ERROR" in line]
    return plain.diagnostics, ours.diagnostics


def test_the_plain_run_sees_einops_own_hints(
    runs: tuple[list[Diagnostic], list[Diagnostic]],
) -> None:
    plain, _ = runs
    # einops' own hints accept any reduction name: the misspelt one is ours to catch.
    assert ("planted_bugs.py", "meen") not in {(d.name, d.message[-7:-1]) for d in plain}
    assert not [d for d in plain if d.code in ("pattern", "shape", "dim-alias", "flops-expr")]


def test_nothing_is_added_or_removed_on_correct_code(
    runs: tuple[list[Diagnostic], list[Diagnostic]],
) -> None:
    plain, ours = runs
    bugs = planted()
    plain_correct = {d for d in plain if (d.name, d.line) not in bugs}
    ours_correct = {d for d in ours if (d.name, d.line) not in bugs}
    added = sorted(map(str, ours_correct - plain_correct))
    removed = sorted(map(str, plain_correct - ours_correct))
    assert not (added or removed), "\n".join(["added:", *added, "removed:", *removed])


def test_every_planted_bug_is_caught(runs: tuple[list[Diagnostic], list[Diagnostic]]) -> None:
    _, ours = runs
    bugs = planted()
    assert len(bugs) >= 15
    missed = []
    for (name, line), (code, fragment) in sorted(bugs.items()):
        here = [d for d in ours if (d.name, d.line) == (name, line)]
        if not any(
            d.code == code and all(word in d.message for word in fragment.split()) for d in here
        ):
            missed.append(f"{name}:{line}: expected [{code}] {fragment!r}, got {here}")
    assert not missed, "\n".join(missed)
