"""Text for terminals: one number formatter (SI prefixes), aligned tables that fit a width.

Every number typedflops prints goes through ``format_si``: three significant digits, an SI
prefix and the unit after a space (``2.10 GFLOP``, ``699 MFLOP/s``, ``33.5 MB``, ``1.20 ms``).
No torch here.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Collection, Sequence

__all__ = [
    "INEXACT_NOTE",
    "TERMINAL_WIDTH",
    "dtype_name",
    "fit_table",
    "format_count",
    "format_percent",
    "format_si",
    "shape_text",
    "text_table",
    "wrap_lines",
]

#: The note under a table with a formula marked ``~`` (not exact).
INEXACT_NOTE = (
    "~ formula true at these sizes, not shown at others "
    "(a run there gave another count, or none ran)"
)

#: The width every table and line of the command-line output fits in, unless ``--wide``.
TERMINAL_WIDTH = 100

_MULTIPLES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_SUBMULTIPLES = ((1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))
_TIME_UNITS = frozenset({"s"})


def _significant(value: float, digits: int) -> str:
    """``value`` with ``digits`` significant digits, trailing zeros kept: 2.1 -> '2.10'."""
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)))
    text = f"{value:.{max(0, digits - 1 - exponent)}f}"
    if abs(float(text)) >= 10 ** (exponent + 1):  # 9.996 rounds to 10.00: one digit less
        text = f"{value:.{max(0, digits - 2 - exponent)}f}"
    return text


def format_si(value: float, unit: str = "", *, digits: int = 3) -> str:
    """``value`` in ``unit`` with an SI prefix and ``digits`` significant digits.

    Multiples (k, M, G, T, P, E) apply to every unit; submultiples (m, µ, n) to seconds only,
    so a fraction of a FLOP or a byte stays a plain number. Whole numbers below 1000 print as
    integers. With no unit the prefix follows the number directly (``5.12k``), as a count.

    >>> format_si(2.1e9, "FLOP"), format_si(699e6, "FLOP/s"), format_si(33.5e6, "B")
    ('2.10 GFLOP', '699 MFLOP/s', '33.5 MB')
    >>> format_si(1.2e-3, "s"), format_si(37.7e-6, "s"), format_si(12, "FLOP"), format_si(5120)
    ('1.20 ms', '37.7 µs', '12 FLOP', '5.12k')
    >>> format_si(999.96e6, "B/s"), format_si(0.25, "B"), format_si(float("inf"), "FLOP/s")
    ('1.00 GB/s', '0.250 B', 'inf FLOP/s')
    """
    space = " " if unit else ""
    if not math.isfinite(value):
        return f"{value}{space}{unit}"
    time = unit in _TIME_UNITS
    scales = [*_MULTIPLES, (1.0, ""), *(_SUBMULTIPLES if time else ())]
    index = next((i for i, (scale, _) in enumerate(scales) if abs(value) >= scale), len(scales) - 1)
    scale, prefix = scales[index]
    if scale == 1.0 and not time and float(value).is_integer():
        return f"{int(value)}{space}{unit}"
    text = _significant(value / scale, digits)
    if abs(float(text)) >= 1000 and index > 0:  # 999.96 rounds up to the next prefix
        scale, prefix = scales[index - 1]
        text = _significant(value / scale, digits)
    return f"{text}{space}{prefix}{unit}"


def format_count(value: float) -> str:
    """A count without a unit, as ``format_si`` writes it: ``33554432`` -> ``33.6M``.

    >>> format_count(33554432), format_count(4.398e13), format_count(12)
    ('33.6M', '44.0T', '12')
    """
    return format_si(value)


def format_percent(fraction: float) -> str:
    """A fraction as a percentage: three significant digits, at most two decimals.

    >>> format_percent(0.182), format_percent(0.0049), format_percent(1.0), format_percent(0)
    ('18.2%', '0.49%', '100%', '0.00%')
    """
    percent = 100 * fraction
    if percent == 0 or not math.isfinite(percent):
        return f"{percent:.2f}%"
    decimals = min(2, max(0, 2 - math.floor(math.log10(abs(percent)))))
    return f"{percent:.{decimals}f}%"


def text_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = ()
) -> str:
    """Columns padded to their widest cell, a rule under the header; ``right`` columns
    (numbers) are right-aligned.

    >>> print(text_table(["op", "FLOPs"], [["mm", "1.02k"], ["einsum", "12"]], right={1}))
    op      FLOPs
    ------  -----
    mm      1.02k
    einsum     12
    """
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.rjust(width) if index in right else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def fit_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Collection[int] = (),
    optional: Sequence[int] = (),
    width: int | None = TERMINAL_WIDTH,
) -> tuple[str, list[str]]:
    """``text_table`` within ``width`` columns: ``optional`` columns are dropped, in that
    order, until the table fits. Returns the table and the headers of the dropped columns.
    ``width=None`` keeps every column.

    >>> table, dropped = fit_table(["a", "note"], [["1", "x" * 20]], optional=[1], width=10)
    >>> print(table)
    a
    -
    1
    >>> dropped
    ['note']
    """
    kept = list(range(len(header)))
    dropped: list[str] = []

    def render() -> str:
        return text_table(
            [header[i] for i in kept],
            [[row[i] for i in kept] for row in rows],
            right={position for position, i in enumerate(kept) if i in right},
        )

    table = render()
    for column in optional:
        if width is None or max(map(len, table.splitlines())) <= width:
            break
        kept.remove(column)
        dropped.append(header[column])
        table = render()
    return table, dropped


_INDENT = re.compile(r"^\s*")


def dtype_name(dtype: object) -> str:
    """A dtype as its users write it: ``bfloat16``, not ``torch.bfloat16``.

    >>> dtype_name("torch.float32")
    'float32'
    """
    return str(dtype).removeprefix("torch.")


def wrap_lines(text: str, width: int | None = TERMINAL_WIDTH, indent: str = "    ") -> str:
    """Each line longer than ``width`` wrapped at spaces, its continuation lines indented by
    ``indent`` more than the line itself; ``width=None`` leaves the text as it is.

    >>> print(wrap_lines("  one two three four", width=12))
      one two
          three
          four
    """
    if width is None:
        return text
    out: list[str] = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        lead = _INDENT.match(line)
        prefix = lead.group(0) if lead else ""
        # (an indent that leaves the longest word no room is cut to what leaves it room)
        room = max(0, width - max((len(word) for word in line.split()), default=0))
        out += textwrap.wrap(
            line.strip(),
            width=width,
            initial_indent=prefix[:room],
            subsequent_indent=(prefix + indent)[:room],
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(out)


def shape_text(shape: Sequence[int]) -> str:
    """A shape as messages show it: ``(8, 784)``; a 1-D shape keeps its comma.

    >>> shape_text((8, 784)), shape_text((3,)), shape_text(())
    ('(8, 784)', '(3,)', '()')
    """
    # (f-strings, not str(): dynamo traces them on the symbolic sizes of a compiled call)
    return "(" + ", ".join(f"{s}" for s in shape) + ("," if len(shape) == 1 else "") + ")"
