"""The documentation followed literally: every block of every page is run or checked (see
``doc_blocks.py`` for what each kind of block is), and the site builds with ``--strict``."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import DOCS, README, ROOT, Block, blocks, files, matches, pages

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: The first words of the commands the pages show, and who runs them.
SET_UP = ("python3 -m venv", "pip install", "pytest", "mypy", "typedflops", "mkdocs serve")
#: Separates the output of one script from the next in a page's run.
MARK = "\x1e--- block at line {} ---\x1e"


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _scripts(page: Path) -> list[Block]:
    return [block for block in blocks("python", page) if not block.path]


SCRIPT_PAGES = [page for page in pages() if page != README and _scripts(page)]
COMMANDS = [
    (page, block, line)
    for page in pages()
    for block in blocks("bash", page)
    for line in block.text.splitlines()
    if line.startswith("typedflops ")
]


def test_every_block_is_one_the_tests_run() -> None:
    for page in pages():
        for block in blocks(page=page):
            where = f"{_name(page)}:{block.line}"
            assert block.language in ("python", "bash", "toml", "text"), where
            if block.language == "bash":
                for line in block.text.splitlines():
                    assert line.startswith(SET_UP), f"{where}: {line}"
            if block.language == "text":
                # not an output: an example project's files, or what pytest reports for a
                # failing test of it (test_pytest_plugin.py runs both)
                assert block.prose.endswith(("files:", "reported as:")), where
            if block.language == "toml":
                tomllib.loads(block.text)
    assert len(SCRIPT_PAGES) >= 5 and len(COMMANDS) >= 3


def run_page(page: Path, directory: Path) -> list[tuple[Block, str]]:
    """Run a page's scripts in order in one process sharing their names; each script's
    stdout."""
    scripts = _scripts(page)
    runner = ["import runpy, sys", "names = {'__name__': '__main__'}"]
    for block in scripts:
        path = directory / f"{page.stem}_line{block.line}.py"
        path.write_text(block.text)
        runner += [
            f"print({MARK.format(block.line)!r}, flush=True)",
            f"names = runpy.run_path({str(path)!r}, init_globals=names, run_name='__main__')",
        ]
    result = subprocess.run(
        [sys.executable, "-c", "\n".join(runner)],
        capture_output=True,
        text=True,
        cwd=directory,
        timeout=600,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    outputs = result.stdout.split("\x1e--- block at line ")[1:]
    return [
        (block, text.split(" ---\x1e\n", 1)[1])
        for block, text in zip(scripts, outputs, strict=True)
    ]


@pytest.mark.parametrize("page", SCRIPT_PAGES, ids=[_name(page) for page in SCRIPT_PAGES])
def test_the_scripts_of_a_page_print_what_it_shows(page: Path, tmp_path: Path) -> None:
    for block, printed in run_page(page, tmp_path):
        if block.output is not None:
            assert matches(block.output, printed), f"{_name(page)}:{block.line}\n{printed}"


@pytest.mark.parametrize(
    ("page", "block", "command"),
    COMMANDS,
    ids=[f"{_name(page)}:{block.line}" for page, block, _ in COMMANDS],
)
def test_a_command_prints_what_the_page_shows(page: Path, block: Block, command: str) -> None:
    words = shlex.split(command)
    result = subprocess.run(
        [sys.executable, "-m", "typedflops", *words[1:]],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    if block.output is not None and block.text.strip() == command:
        assert matches(block.output, result.stdout), result.stdout


def test_the_set_up_commands_are_the_readmes() -> None:
    (readme,) = [block for block in blocks("bash") if "pip install" in block.text]
    for page in pages():
        for block in blocks("bash", page):
            if "pip install -e" in block.text:
                assert block.text == readme.text, f"{_name(page)}:{block.line}"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """Every page, link and docstring of the API reference renders without a warning."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert (tmp_path / "reference" / "index.html").is_file()
    for page in DOCS.rglob("*.md"):
        name = page.relative_to(DOCS).with_suffix("")
        folder = name.parent if name.name == "index" else name
        assert (tmp_path / folder / "index.html").is_file(), name


def test_the_mypy_page_example_reports_what_it_shows(tmp_path: Path) -> None:
    page = DOCS / "mypy.md"
    for path, text in files(page).items():
        (tmp_path / path).write_text(text)
    (command,) = [block for block in blocks("bash", page) if block.text.startswith("mypy")]
    words = shlex.split(command.text)
    result = subprocess.run(
        [sys.executable, "-m", *words], capture_output=True, text=True, cwd=tmp_path, timeout=600
    )
    assert result.returncode == 1, result.stderr
    assert command.output is not None and matches(command.output, result.stdout), result.stdout


def test_docstrings_show_as_markdown_in_the_reference() -> None:
    sys.path.insert(0, str(DOCS / "hooks"))
    try:
        from docstrings import markdown  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(DOCS / "hooks"))
    text = "See :func:`~typedflops.planning.plan`.\n\n>>> 1 + 1\n2\n\nAfter."
    assert markdown(text).splitlines() == [
        "See `plan`.",
        "",
        "```pycon",
        ">>> 1 + 1",
        "2",
        "```",
        "",
        "After.",
    ]
