"""A griffe extension for the API reference: the docstrings are plain text written to be
read in a terminal (``help()``) and run as doctests; this shows them as Markdown.

- a run of ``>>>`` lines and their output becomes a ``pycon`` code block;
- a Sphinx role (``:func:`~typedflops.planning.plan```) becomes a code span (``plan``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:func|meth|class|data|attr|mod|obj|exc):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    name = match.group(2)
    return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"


def markdown(text: str) -> str:
    """The docstring ``text`` as Markdown: doctests fenced, roles as code spans."""
    lines: list[str] = []
    in_doctest = False
    for line in text.splitlines():
        starts = line.lstrip().startswith(">>>")
        if starts and not in_doctest:
            lines.append("```pycon")
            in_doctest = True
        elif in_doctest and not line.strip():
            lines.append("```")
            in_doctest = False
        lines.append(line if in_doctest else _ROLE.sub(_role, line))
    if in_doctest:
        lines.append("```")
    return "\n".join(lines)


class DocstringsAsMarkdown(griffe.Extension):
    """Rewrites each object's docstring as Markdown once it is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
