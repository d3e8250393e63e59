"""A test failed by a :class:`~typedflops.errors.ContractError`, reported in a few lines.

The report keeps the test's line, the lines that made the bad call, and the error's own
message; the frames inside typedflops and torch (``Module.__call__`` between a model and
the module it calls) are left out. Each frame shows its one line, as pytest's
``--tb=short`` does, read from the file with :mod:`linecache`: pytest finds the statement
around a line by parsing and walking the whole module for every frame of every failure,
which takes longer than the test itself on a suite whose modules are thousands of lines
and whose failures run deep into them.

Importing this module imports neither torch nor the rest of typedflops.
"""

from __future__ import annotations

import linecache
from pathlib import Path
from typing import Any

import pytest

__all__ = ["compact_report"]

_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _hidden_directories() -> tuple[Path, ...]:
    """typedflops' own package, and torch's when it is loaded (``Module.__call__`` and the
    other frames between a model's code and the module it calls)."""
    import sys

    torch = sys.modules.get("torch")
    torch_file = getattr(torch, "__file__", None)
    if torch_file is None:
        return (_PACKAGE_DIR,)
    return (_PACKAGE_DIR, Path(torch_file).resolve().parent)


def _is_hidden(entry: Any, directories: tuple[Path, ...]) -> bool:  # a pytest TracebackEntry
    path = Path(entry.path).resolve()
    return any(path.is_relative_to(directory) for directory in directories)


def _formatter() -> Any:
    """pytest's formatter of tracebacks, reading each frame's lines with linecache (None
    where this pytest has none to build on)."""
    global _FORMATTER
    if _FORMATTER is not None:
        return _FORMATTER
    try:
        from _pytest._code import Source, code
    except ImportError:  # pragma: no cover - pytest moved its internals
        return None
    base = getattr(code, "ExceptionInfoFormatter", None) or getattr(code, "FormattedExcinfo", None)
    if base is None:  # pragma: no cover - pytest moved its internals
        return None

    class ShortFormatter(base):  # type: ignore[misc,valid-type]
        def _getentrysource(self, entry: Any) -> Any:
            # The lines from the function's first to the frame's: all that the short
            # style reads (it prints the frame's line, placed by its offset from the first).
            path = str(entry.path)
            first = entry.getfirstlinesource()
            lines = [linecache.getline(path, n + 1) for n in range(first, entry.lineno + 1)]
            return Source(lines) if any(lines) else None

    _FORMATTER = ShortFormatter
    return _FORMATTER


_FORMATTER: Any = None


def compact_report(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """The report of a test whose call raised a ContractError: the frames from the test's
    own line on, without typedflops' and torch's, each in its one line, then the error."""
    excinfo = call.excinfo
    when = call.when
    assert excinfo is not None and when != "collect"
    # pytest's own cut: from the test function's frame on (wherever it is defined, as a
    # TestCase's inherited test methods are), without unittest's frames
    own_filter = getattr(item, "_traceback_filter", None)
    if own_filter is not None:
        traceback = own_filter(excinfo)
    else:  # pragma: no cover - pytest before 7.4
        traceback = excinfo.traceback.cut(path=item.path).filter(excinfo)
    hidden = _hidden_directories()
    excinfo.traceback = traceback.filter(lambda entry: not _is_hidden(entry, hidden))
    formatter = _formatter()
    if formatter is None:  # pragma: no cover - pytest moved its internals
        longrepr: Any = excinfo.getrepr(style="short", chain=False, funcargs=False)
    else:
        formatter = formatter(style="short", abspath=False, funcargs=False, chain=False)
        longrepr = formatter.repr_excinfo(excinfo)
    sections = [
        (f"Captured {key} {when}", content)
        for when, key, content in getattr(item, "_report_sections", [])
    ]
    return pytest.TestReport(
        item.nodeid,
        item.location,
        {name: 1 for name in item.keywords},
        "failed",
        longrepr,
        when,
        sections,
        call.duration,
        call.start,
        call.stop,
        user_properties=item.user_properties,
    )
