"""Real-code corpus: files reduced from the patterns of public repositories (written here,
not copied) are checked by plain mypy and by mypy with typedflops' set-up (its einops stubs
and plugin). On correct code the two must agree line for line; every planted bug
(``# BUG: <code> <fragment>``) must be caught by the set-up, and at least 90% of the
held-out set (``# PLANTED: <code> <fragment>``, each confirmed wrong at run time by
test_planted_runs.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy_runs import PLUGIN, Diagnostic, MypyRun, plain_python, run_mypy

CORPUS = Path(__file__).resolve().parent / "corpus"
# Strict, except that untyped code (common in research repositories) is still checked
# rather than rejected.
CONFIG = (
    "[mypy]\nstrict = True\nshow_error_codes = True\ndisallow_untyped_defs = False\n"
    "disallow_incomplete_defs = False\ndisallow_untyped_calls = False\n"
)
BUG = re.compile(r"#\s*BUG:\s*(?P<code>[\w-]+)(?:\s+(?P<fragment>.*?))?\s*$")
PLANTED = re.compile(r"#\s*PLANTED:\s*(?P<code>[\w-]+)(?:\s+(?P<fragment>.*?))?\s*$")


def corpus_files() -> list[Path]:
    return sorted(path for path in CORPUS.glob("*.py") if path.name != "conftest.py")


def planted(mark: re.Pattern[str] = BUG) -> dict[tuple[str, int], tuple[str, str]]:
    """(file, line) -> (code, message fragment) of every planted bug with ``mark``."""
    found: dict[tuple[str, int], tuple[str, str]] = {}
    for path in corpus_files():
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            match = mark.search(text)
            if match:
                found[path.name, number] = (match["code"], match["fragment"] or "")
    return found


def _caught(
    ours: list[Diagnostic], bugs: dict[tuple[str, int], tuple[str, str]]
) -> tuple[list[str], list[str]]:
    """(caught, missed) among ``bugs``: a diagnostic with the code and fragment there."""
    caught: list[str] = []
    missed: list[str] = []
    for (name, line), (code, fragment) in sorted(bugs.items()):
        here = [d for d in ours if (d.name, d.line) == (name, line)]
        found = any(
            d.code == code and all(word in d.message for word in fragment.split()) for d in here
        )
        (caught if found else missed).append(f"{name}:{line}: [{code}] {fragment!r}, got {here}")
    return caught, missed


@pytest.fixture(scope="module")
def mypy_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[MypyRun, MypyRun]:
    """(plain mypy, mypy with typedflops' set-up) over the corpus."""
    base = tmp_path_factory.mktemp("corpus")
    python = plain_python(base / "plain-env")
    plain = run_mypy(corpus_files(), cache_dir=base / "plain", config=CONFIG, python=python)
    ours = run_mypy(corpus_files(), cache_dir=base / "ours", config=CONFIG + PLUGIN)
    assert not [line for line in plain.lines + ours.lines if "INTERNAL ERROR" in line]
    return plain, ours


@pytest.fixture(scope="module")
def runs(mypy_runs: tuple[MypyRun, MypyRun]) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """(plain mypy's errors, errors with typedflops' set-up) over the corpus."""
    plain, ours = mypy_runs
    return plain.diagnostics, ours.diagnostics


def test_a_stand_in_for_a_dtype_is_noted_once_per_module(
    mypy_runs: tuple[MypyRun, MypyRun],
) -> None:
    plain, ours = mypy_runs
    notes = sorted(line for line in ours.lines if "is not jaxtyping's" in line)
    assert [note.partition(" here ")[0] for note in notes] == [
        "tests/typing/corpus/standin_object_style.py:23: note: Float[...]",
        "tests/typing/corpus/standin_style.py:41: note: Float[...]",
    ], notes
    assert not [line for line in plain.lines if "is not jaxtyping's" in line]


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
    bugs = {**planted(), **planted(PLANTED)}
    plain_correct = {d for d in plain if (d.name, d.line) not in bugs}
    ours_correct = {d for d in ours if (d.name, d.line) not in bugs}
    added = sorted(map(str, ours_correct - plain_correct))
    removed = sorted(map(str, plain_correct - ours_correct))
    assert not (added or removed), "\n".join(["added:", *added, "removed:", *removed])


def test_every_planted_bug_is_caught(runs: tuple[list[Diagnostic], list[Diagnostic]]) -> None:
    _, ours = runs
    bugs = planted()
    assert len(bugs) >= 15
    _, missed = _caught(ours, bugs)
    assert not missed, "\n".join(missed)


def test_nine_in_ten_of_the_held_out_set_are_caught(
    runs: tuple[list[Diagnostic], list[Diagnostic]],
) -> None:
    _, ours = runs
    bugs = planted(PLANTED)
    caught, missed = _caught(ours, bugs)
    print(f"held-out planted bugs caught: {len(caught)} of {len(bugs)}")
    print("\n".join(["missed:", *missed]))
    assert len(bugs) >= 40
    assert len(caught) >= 0.9 * len(bugs), "\n".join(missed)
