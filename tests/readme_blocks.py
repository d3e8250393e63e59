"""The README's fenced code blocks, for the tests that run them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_PATH_COMMENT = re.compile(r"^# ([\w/]+\.(?:py|toml))\b")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, text, the line it starts on, and the file it shows
    when its first line is a ``# path/to/file.py`` comment ("" otherwise)."""

    language: str
    text: str
    line: int
    path: str


def blocks(language: str | None = None) -> list[Block]:
    """The README's fenced blocks, in order (only ``language``'s when given)."""
    text = README.read_text()
    found = []
    for match in _FENCE.finditer(text):
        body = match.group(2)
        named = _PATH_COMMENT.match(body)
        found.append(
            Block(
                language=match.group(1),
                text=body,
                line=text.count("\n", 0, match.start()) + 1,
                path=named.group(1) if named else "",
            )
        )
    return [block for block in found if language is None or block.language == language]


def after(marker: str) -> Block:
    """The first block after the line ``marker`` (e.g. the output shown after a command)."""
    text = README.read_text()
    line = text.count("\n", 0, text.index(marker)) + 1
    return next(block for block in blocks() if block.line > line)
