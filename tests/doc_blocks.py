"""The fenced code blocks of the README and the documentation pages, for the tests that run
them (``test_docs.py``, ``test_readme.py``, ``test_pytest_plugin.py``).

What each kind of block is, and so how it is tested:

- ``python``: a script. A page's scripts run in order in one fresh process and share their
  names, as a reader who pastes them one after another would see them. A block whose first
  line is a ``# path/to/file.py`` comment is a file of an example project instead.
- ``text`` right after a ``python`` or ``bash`` block (nothing but blank lines between): what
  that block prints. ``...`` alone on a line stands for any number of lines, and inside a
  line for any text (timings, addresses).
- ``bash``: commands. ``typedflops ...`` runs; ``pytest ...`` and ``mypy ...`` run in the
  page's example project; the set-up commands (``pip``, ``python3 -m venv``) are checked
  against the README's.
- ``toml``: configuration, parsed; a ``# pyproject.toml`` one is the example project's.
- ``text`` after a prose line ending in "files:" lists an example project's files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_PATH_COMMENT = re.compile(r"^# ([\w/.-]+\.(?:py|toml|ini|cfg))\b")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, text, the line it starts on, the file it shows when
    its first line is a ``# path/to/file.py`` comment ("" otherwise), and its output: the
    ``text`` block right after it, if any (None otherwise)."""

    language: str
    text: str
    line: int
    path: str
    output: str | None = None
    prose: str = ""


def pages() -> list[Path]:
    """The README and every documentation page."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(language: str | None = None, page: Path = README) -> list[Block]:
    """A page's fenced blocks, in order (only ``language``'s when given). A ``text`` block
    that is another block's output is that block's ``output``, not a block of its own."""
    text = page.read_text()
    found: list[Block] = []
    end = 0
    for match in _FENCE.finditer(text):
        body = match.group(2)
        between = text[end : match.start()]
        end = match.end()
        if match.group(1) == "text" and found and not between.strip():
            previous = found[-1]
            if previous.language in ("python", "bash") and previous.output is None:
                found[-1] = Block(
                    previous.language,
                    previous.text,
                    previous.line,
                    previous.path,
                    body,
                    previous.prose,
                )
                continue
        named = _PATH_COMMENT.match(body)
        found.append(
            Block(
                language=match.group(1),
                text=body,
                line=text.count("\n", 0, match.start()) + 1,
                path=named.group(1) if named else "",
                prose=between.strip().splitlines()[-1] if between.strip() else "",
            )
        )
    return [block for block in found if language is None or block.language == language]


def after(marker: str, page: Path = README) -> Block:
    """The first block after the line ``marker`` (e.g. the command shown after a sentence)."""
    text = page.read_text()
    line = text.count("\n", 0, text.index(marker)) + 1
    return next(block for block in blocks(page=page) if block.line > line)


def files(page: Path) -> dict[str, str]:
    """The example project a page shows: its files' paths and texts."""
    return {block.path: block.text for block in blocks(page=page) if block.path}


def matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` output is what ``expected`` shows: ``...`` alone on a line stands
    for any lines, and inside a line for any text.

    >>> matches("a\\n...\\nd\\n", "a\\nb\\nc\\nd\\n")
    True
    >>> matches("took ... ms\\n", "took 3.2 ms\\n"), matches("a\\n", "b\\n")
    (True, False)
    """
    pattern = []
    for line in expected.splitlines():
        if line.strip() == "...":
            pattern.append(r"(?:.*\n)*?")
        else:
            pattern.append(".*".join(map(re.escape, line.split("..."))) + r"\n")
    lines = "".join(line + "\n" for line in actual.splitlines())
    return re.fullmatch("".join(pattern), lines) is not None
