"""``record()`` and what it shows: rows, a total, a text table and JSON."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from ...text import format_count, text_table
from ..types import Cost
from .recorder import RecordSession, Row, merged_total

__all__ = ["Recorder", "record"]


class Recorder:
    """What a ``with record() as rec:`` block saw: its decorated calls, nested as they ran.

    Calls of one function with one signature under one caller share a row (``calls``
    counts them); a row's :meth:`~Row.cost` is the cost of one call.
    """

    def __init__(self) -> None:
        self.session = RecordSession()

    @property
    def calls(self) -> list[Row]:
        """The top-level rows, in the order of their first call (each with its children)."""
        return self.session.root.visible_children()

    @property
    def total(self) -> Cost:
        """The cost of everything recorded: each row times its calls, plus ops outside any
        decorated call (nested calls roll up into their callers)."""
        return merged_total(self.calls, self.session.root)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per row, depth-first: function, depth, calls, and its cost per call."""
        found: list[dict[str, Any]] = []

        def visit(row: Row, depth: int) -> None:
            cost = row.cost()
            entry: dict[str, Any] = {"function": row.function, "depth": depth, "calls": row.calls}
            entry.update(cost.to_dict())
            entry.pop("ops")
            if row.measurement is not None:
                entry["measurement"] = row.measurement.to_dict()
            found.append(entry)
            for child in row.visible_children():
                visit(child, depth + 1)

        for call in self.calls:
            visit(call, 0)
        return found

    def table(self) -> str:
        """A text table: function, calls, dims, formula, FLOPs and bytes per call, intensity
        (and time, FLOP/s, MFU where measured); the ops run outside any decorated call (such
        as making the inputs), when there are any; the total; uncounted ops by name."""
        header = ["function", "calls", "dims", "formula", "FLOPs", "bytes", "FLOP/B"]
        rows = self.rows()
        timed = any("measurement" in row for row in rows)
        if timed:
            header += ["time", "FLOP/s", "MFU"]
        body: list[list[str]] = []
        inexact = False
        for row in rows:
            mark = "" if row["exact"] else "~ "
            inexact |= not row["exact"]
            cells = [
                "  " * row["depth"] + row["function"],
                str(row["calls"]),
                ", ".join(f"{k}={v}" for k, v in row["dims"].items()),
                mark + row["formula"],
                format_count(row["flops"]),
                format_count(row["bytes_read"] + row["bytes_written"]),
                f"{row['intensity']:.3g}",
            ]
            if timed:
                measured = row.get("measurement") or {}
                cells += [
                    f"{measured['median'] * 1e3:.3g} ms" if measured else "",
                    format_count(measured["flop_per_sec"]) if measured else "",
                    f"{measured['mfu']:.1%}" if measured.get("mfu") is not None else "",
                ]
            body.append(cells)
        forward, _, read, written = self.session.root.own_counts()
        if forward or read or written:
            # Ops run outside any decorated call (making the inputs, a loss): in the total.
            moved = read + written
            body.append(
                ["(outside calls)", "", "", "", format_count(forward), format_count(moved)]
                + [f"{forward / moved:.3g}" if moved else "-"]
                + [""] * (len(header) - 7)
            )
        total = self.total
        inexact |= not total.exact
        body.append(
            [
                "total",
                "",
                ", ".join(f"{k}={v}" for k, v in total.dims.items()),
                ("" if total.exact else "~ ") + str(total.formula),
                format_count(total.flops),
                format_count(total.bytes),
                f"{total.intensity:.3g}",
            ]
            + [""] * (len(header) - 7)
        )
        lines = [text_table(header, body, right={1, 4, 5, 6})]
        if total.uncounted:
            lines.append(f"uncounted ops (ran, no FLOP rule): {', '.join(total.uncounted)}")
        if inexact:
            lines.append("~ formula holds at these sizes only (not checked at other sizes)")
        return "\n".join(lines)

    def to_json(self) -> str:
        """Everything recorded as JSON: the rows (depth-first) and the total."""
        return json.dumps({"calls": self.rows(), "total": self.total.to_dict()}, indent=2)


@contextlib.contextmanager
def record() -> Iterator[Recorder]:
    """Record every decorated call and op run inside the block (this thread or task).

    >>> import torch
    >>> from typedflops import einsum
    >>> with record() as rec:
    ...     _ = einsum(torch.ones(4, 3), torch.ones(3, 2), "i j, j k -> i k")
    >>> rec.total.flops
    48
    """
    recorder = Recorder()
    with recorder.session.active():
        yield recorder
