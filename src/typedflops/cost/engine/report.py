"""``record()`` and what it shows: rows, a total, a text table and JSON."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import time
import types
from collections.abc import Iterator
from typing import Any

import sympy
import torch

from ...contract.function import counting_frame
from ...text import INEXACT_NOTE, format_count, text_table
from ..types import Cost, Term
from .backward_ran import with_backward_ran
from .body_backward import UNDECIDED
from .live_records import open_here, register, unregister
from .ranks import AcrossRanks, across_ranks
from .recorder import Row, loose_counts, merged_total
from .recording import entered, left
from .works import RecordSession

__all__ = ["RecordBlock", "Recorder", "record"]


class Recorder:
    """What a ``with record() as rec:`` block saw: its decorated calls, nested as they ran.

    Every call is counted as it ran. Calls of one function under one caller share a row
    (``calls`` counts them) only when they did the same work: the same ops on the same
    shapes, and the same calls inside; a row's :meth:`~Row.cost` is the cost of one call.
    """

    def __init__(self) -> None:
        self.session = RecordSession()
        self._total: Cost | None = None
        #: Seconds the ``with record()`` block took (after the GPU's queued work finished).
        self.seconds = 0.0

    @property
    def calls(self) -> list[Row]:
        """The top-level rows, in the order of their first call (each with its children)."""
        session = self.session
        session.fold(final=session.closed)
        inside = session.open_works()  # (read inside calls that have not returned)
        if not inside:
            return [Row(work, calls) for work, calls in session.top.items()]
        found = dict(session.top)
        for work, calls in inside.items():
            found[work] = found.get(work, 0) + calls
        return [Row(work, calls) for work, calls in found.items()]

    @property
    def total(self) -> Cost:
        """The cost of everything recorded: each row times its calls, plus ops outside any
        decorated call (nested calls roll up into their callers)."""
        if self._total is not None:
            return self._total
        ran = self.session.backward_ran
        cost = with_backward_ran(merged_total(self.calls, self.session), ran)
        # (an open record may see more; a closed one whose ops of a Function's backward
        # wait to be told apart, a forward run again or a backward, may count them anew)
        if self.session.closed and not (ran.ran and UNDECIDED.holds(ran)):
            self._total = cost
        return cost

    def rows(self) -> list[dict[str, Any]]:
        """One dict per row, depth-first: function, depth, calls, and its cost per call
        (``Cost.to_dict()``'s fields, but ``ops``)."""
        found: list[dict[str, Any]] = []
        pending = [(row, 0) for row in reversed(self.calls)]
        while pending:
            row, depth = pending.pop()
            entry: dict[str, Any] = {"function": row.function, "depth": depth, "calls": row.calls}
            entry.update(_fields(row.cost()))
            if row.measurement is not None:
                entry["measurement"] = row.measurement.to_dict()
            found.append(entry)
            pending.extend((child, depth + 1) for child in reversed(row.visible_children()))
        return found

    def table(self) -> str:
        """A text table: function, calls, dims, formula, FLOPs and bytes per call, intensity
        (and time, FLOP/s, MFU where measured); the ops run outside any decorated call (such
        as making the inputs), when there are any; the total; uncounted ops by name. Where
        the record has backward FLOPs (a backward ran in it, or its calls' is predicted), a
        ``backward`` column beside ``FLOPs`` holds them, so that its figures add up too."""
        header = ["function", "calls", "dims", "formula", "FLOPs", "bytes", "FLOP/B"]
        rows = self.rows()
        total = self.total
        backward = bool(total.backward_flops) or any(row["backward_flops"] for row in rows)
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
        loose = loose_counts(self.session)
        forward, read, written = loose.forward, loose.read, loose.written
        if forward or read or written:
            # Ops run outside any decorated call (making the inputs, a loss): in the total.
            moved = read + written
            body.append(
                ["(outside calls)", "", "", "", format_count(forward), format_count(moved)]
                + [f"{forward / moved:.3g}" if moved else "-"]
                + [""] * (len(header) - 7)
            )
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
        right = {1, 4, 5, 6}
        if backward:
            header, body, right = _with_backward(header, body, rows, total)
        lines = [text_table(header, body, right=right)]
        if total.uncounted:
            lines.append(f"uncounted ops (ran, no FLOP rule): {', '.join(total.uncounted)}")
        if inexact:
            lines.append(INEXACT_NOTE)
        return "\n".join(lines)

    def to_json(self) -> str:
        """Everything recorded as JSON: the rows (depth-first) and the total."""
        return json.dumps({"calls": self.rows(), "total": self.total.to_dict()}, indent=2)

    def across_ranks(
        self,
        *,
        backward: bool = True,
        seconds: float | None = None,
        dtype: torch.dtype | None = None,
        peak: float | None = None,
        group: Any = None,
    ) -> AcrossRanks:
        """In a distributed run (``torchrun``), every rank's counts and time, gathered: a
        row per rank and the run's FLOP/s and MFU (FLOPs summed over the ranks, the slowest
        rank's time, the sum of the ranks' peaks). Every rank of ``group`` calls it.
        ``seconds`` defaults to the ``with`` block's own time; ``backward`` says whether the
        block ran the backward pass; ``peak`` and ``dtype`` as in :func:`.ranks.across_ranks`.
        """
        elapsed = self.seconds if seconds is None else seconds
        return across_ranks(
            self.total, elapsed, backward=backward, dtype=dtype, peak=peak, group=group
        )


def _with_backward(
    header: list[str], body: list[list[str]], rows: list[dict[str, Any]], total: Cost
) -> tuple[list[str], list[list[str]], set[int]]:
    """The table with a ``backward`` column after ``FLOPs``: each row's backward FLOPs per
    call, the ops outside any call (what the total has beyond the top-level rows' calls)
    and the total's."""
    cells = [format_count(row["backward_flops"]) for row in rows]
    top = sum(row["backward_flops"] * row["calls"] for row in rows if row["depth"] == 0)
    if len(body) > len(rows) + 1:  # (the row of the ops outside any call)
        cells.append(format_count(total.backward_flops - top))
    cells.append(format_count(total.backward_flops))
    widened = [[*line[:5], cell, *line[5:]] for line, cell in zip(body, cells, strict=True)]
    return [*header[:5], "backward", *header[5:]], widened, {1, 4, 5, 6, 7}


def _fields(cost: Cost) -> dict[str, Any]:
    """``cost.to_dict()`` without its ops, formulas printed once each (a thousand rows of
    one function share their formulas)."""
    return cost.to_dict(ops=False, text=_text)


@functools.lru_cache(maxsize=4096)
def _text(formula: sympy.Expr) -> str:
    return str(formula)


_CONTEXTLIB = contextlib.__file__


def _block_frame() -> tuple[int, types.CodeType] | None:
    """The frame of the code inside the ``with record()`` block (past contextlib's), by its
    id and code."""
    frame: types.FrameType | None = sys._getframe(2)  # (past this and record's generator)
    while frame is not None and (frame.f_code.co_filename == _CONTEXTLIB or frame.f_code is _ENTER):
        frame = frame.f_back
    return None if frame is None else (id(frame), frame.f_code)


class RecordBlock(contextlib.AbstractContextManager["Recorder"]):
    """What :func:`record` returns: a ``with`` block entered once (a second ``with`` of the
    same object is refused: each block opens a ``record()`` of its own)."""

    def __init__(self) -> None:
        self._block: contextlib.AbstractContextManager[Recorder] | None = None

    def __enter__(self) -> Recorder:
        if self._block is not None:
            raise RuntimeError(
                "this record() was entered already: each `with` block needs a record() of its"
                " own (`with record() as rec:`)"
            )
        self._block = _recording()
        return self._block.__enter__()

    def __exit__(self, *exc: Any) -> bool | None:
        assert self._block is not None
        return self._block.__exit__(*exc)


_ENTER = RecordBlock.__enter__.__code__

_NOT_SEEN = Term.of_count(0, exact=False)
#: The total of a record opened inside a dry run (a function's body run on meta to fit or
#: estimate its cost, a Function's backward run on fake tensors to count it).
IN_DRY_RUN = Cost(
    forward=_NOT_SEEN,
    backward=_NOT_SEEN,
    dims={},
    bytes_read=0,
    bytes_written=0,
    uncounted=("ops run in a dry run (counted by the dry run, not by a record opened in it)",),
    matmul=_NOT_SEEN,
)


def record() -> RecordBlock:
    """Record every decorated call and op run inside the block, in this thread or asyncio
    task (and the tasks it starts inside the block).

    Every call is counted as it ran, as ``FlopCounterMode`` counts. Records nest: each sees
    everything run inside it. Threads and tasks record their own calls, each in its own
    record: what its thread and task run inside the block counts in it, also in a context
    copied before it opened (``ctx.run``), or inside a decorated call that has returned.
    A worker of a ``ThreadPoolExecutor`` or of ``asyncio.to_thread`` is another thread:
    what it runs counts in the records it opens, not in this one (as FlopCounterMode).
    Read in this thread while decorated calls have not returned (their body, a hook), the
    record counts what they ran so far; read from another thread, only the calls that have
    returned to the block.

    >>> import torch
    >>> from typedflops import einsum
    >>> with record() as rec:
    ...     _ = einsum(torch.ones(4, 3), torch.ones(3, 2), "i j, j k -> i k")
    >>> rec.total.flops
    48
    """
    return RecordBlock()


@contextlib.contextmanager
def _recording() -> Iterator[Recorder]:
    """:func:`record`'s block."""
    recorder = Recorder()
    session = recorder.session
    outer = counting_frame.get()
    if outer is not None and type(outer) is not tuple:
        # a dry run's body (an estimate, a row's fit): nothing runs there, so the record
        # sees nothing, and the dry run counts the block's ops as the body's; its total
        # says so (0 FLOPs, not exact), never a count of 0 taken for what ran
        session.close()
        recorder._total = IN_DRY_RUN
        yield recorder
        return
    # the records open here, in this thread (a context copied to another thread, as
    # asyncio.to_thread does, holds records that are not this thread's; one copied
    # before a record of this thread or task opened lacks it)
    here = open_here(outer)
    mine = (
        [c for c in here if c.session.thread == session.thread and not c.session.closed]
        if type(here) is tuple
        else []
    )
    ours = (*mine, session.root)
    token = counting_frame.set(ours)
    register(session)
    session.block = _block_frame()
    mode = session.mode = entered()
    start = time.perf_counter()
    try:
        yield recorder
    finally:
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            torch.cuda.synchronize()
        recorder.seconds = time.perf_counter() - start
        if session.mode is not None:
            if session.mode.again.regions:
                session.mode.again.settle()  # (checkpointed regions that ended in the block)
            session.mode.sums.settle()  # (the sums of what the block's results were made from)
        left(mode)
        unregister(session)
        session.block = None
        current = counting_frame.get()
        session.close(current)
        if current is ours:
            try:  # noqa: SIM105 (a context manager costs more, here on each call)
                counting_frame.reset(token)
            except LookupError:  # (gone already: see contract.scope.call_scope)
                pass
        elif type(current) is tuple:
            # closed before a record opened inside it (an ExitStack, enter and exit by
            # hand): the records still open go on
            rest = tuple(call for call in current if call.session is not session)
            counting_frame.set(rest or (None if type(outer) is tuple else outer))
