"""Text for terminals: counts in engineering notation and aligned tables (no torch here)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["format_count", "text_table"]


def format_count(value: float) -> str:
    """A count in engineering notation: ``33554432`` -> ``33.55M``.

    >>> format_count(33554432), format_count(4.398e13), format_count(12)
    ('33.55M', '43.98T', '12')
    """
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def text_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = ()
) -> str:
    """Columns padded to their widest cell, a rule under the header; ``right`` columns
    are right-aligned.

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
