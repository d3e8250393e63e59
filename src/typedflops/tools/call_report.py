"""The calls a test run made, and their costs: the pytest plugin's ``--typedflops-report``.

:class:`CallTally` counts the checked calls of every function with a jaxtyping array
annotation and the dims each call bound; each distinct binding is costed once by dry runs
on meta tensors, when the test that made it ends. Where no dry run can cost a call, the
calls counted as they ran stand in (see :mod:`.as_run`). What it knows becomes plain
:class:`Record` dicts (strings and numbers only), so that pytest-xdist workers can send
theirs to the controller, which merges them (:func:`merge`) and prints one table
(:func:`table`).

Importing this module imports neither torch nor the rest of typedflops.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from ..text import INEXACT_NOTE, text_table

if TYPE_CHECKING:
    from ..contract.function import CheckedFunction
    from ..contract.scope import CallState
    from ..cost.engine.dryrun import Probe
    from ..cost.types import Cost

__all__ = ["CallTally", "Record", "merge", "no_formula_reason", "not_costed_reason", "table"]

_MAX_DIMS_SHOWN = 5
# Failed dry runs of a function (none succeeding) after which it is not dry-run again.
_DRY_RUNS_TRIED = 2
_MAX_DIMS_WIDTH = 60

Size = int | tuple[int, ...]
Binding = tuple[tuple[str, Size], ...]


class Record(TypedDict):
    """One function called with one binding of its dims: what the report shows of it."""

    module: str
    name: str
    line: int
    binding: list[tuple[str, Size]]
    calls: int
    formula: str | None  # None: not costed, `why` says why
    flops: int
    exact: bool
    uncounted: list[str]
    # What a dry run took as given where values decide the work (Cost.assumed).
    assumed: list[str]
    why: str
    # Calls counted as they ran where no formula could be had: [FLOPs, bytes] of each.
    as_run: list[list[int]]


class _Entry:
    """What the tally knows of one function: its calls and costs, per binding of its dims."""

    __slots__ = (
        "as_run",
        "calls",
        "costed",
        "costs",
        "failed",
        "function",
        "name",
        "pending",
        "uncounted",
    )

    def __init__(self, function: CheckedFunction[..., Any]) -> None:
        self.function = function
        self.name = function.name
        self.calls: dict[Binding, int] = {}
        # A Cost, or why none could be had (in words).
        self.costs: dict[Binding, Cost | str] = {}
        # Calls recorded as they ran: (FLOPs, bytes) of each, and the ops they ran that
        # have no FLOP rule, per binding.
        self.as_run: dict[Binding, list[list[int]]] = {}
        self.uncounted: dict[Binding, dict[str, None]] = {}
        # Dry runs that could not cost a binding; whether one did.
        self.failed = 0
        self.costed = False
        # Bindings not costed yet, with the probe that rebuilds the call (shapes, not
        # tensors; a module it was called on): held until the test ends, no longer.
        self.pending: dict[Binding, Probe] = {}


def _has_array_hint(hint: Any) -> bool:
    from ..contract.annotation import is_tensor_annotation

    if is_tensor_annotation(hint):
        return True
    import typing

    return any(_has_array_hint(arg) for arg in typing.get_args(hint))


def _costs_anything(function: CheckedFunction[..., Any]) -> bool:
    """Whether ``function`` has a jaxtyping array annotation (the report's functions:
    those the cost model can name dims for)."""
    contract = function.contract
    hints = [p.hint for p in contract.parameters]
    hints += [p.hint for p in (contract.var_positional, contract.var_keyword) if p is not None]
    return any(_has_array_hint(hint) for hint in [*hints, contract.return_hint])


_DATA_DEPENDENT = re.compile(
    r"data-dependent|item\(\)|_local_scalar_dense|doesn't have storage|does not have storage"
    r"|data_ptr|Cannot copy out of meta|cannot be converted to Python|meta tensor",
    re.IGNORECASE,
)


def no_formula_reason(error: BaseException) -> str:
    """Why a dry run could not cost a call (``error``: what stopped it), in words that say
    what the dry run lacked, not that the call went wrong.

    >>> no_formula_reason(RuntimeError("Tensor.item() cannot be called on meta")).split("(")[0]
    'the body reads tensor values '
    >>> from typedflops.errors import DeviceError
    >>> no_formula_reason(DeviceError("f(): argument 'x' is on cpu but 'y' is on meta"))[:50]
    'a dry run runs on meta tensors, and this call meet'
    """
    from ..errors import ContractError, DeviceError, DryRunError

    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    if isinstance(error, DryRunError) and error.reads_values is not None:
        return (  # the op and the line that ran it
            f"the body reads tensor values ({error.reads_values}), which a dry run on meta "
            "tensors does not have"
        )
    if isinstance(error, DeviceError):
        return (
            "a dry run runs on meta tensors, and this call meets tensors on another device "
            f"that it cannot replace: {first[:120]}"
        )
    if isinstance(error, ContractError):
        return (
            "a dry run could not rebuild this call at other sizes (an argument it cannot "
            "resize, such as an object held in self, keeps its own sizes, and the rebuilt "
            "call no longer fits its annotations)"
        )
    if _DATA_DEPENDENT.search(first):
        return (
            f"the body reads tensor values ({first[:80]}), which a dry run on meta tensors "
            "does not have"
        )
    return f"a dry run of the body on meta tensors stopped ({type(error).__name__}: {first[:80]})"


def not_costed_reason(error: BaseException) -> str:
    """Why a dry run could not cost a call, in words that say the call itself was fine.

    >>> reason = not_costed_reason(RuntimeError("Tensor.item() cannot be called on meta"))
    >>> reason.split("(")[0]
    'not costed: the body reads tensor values '
    """
    return _not_costed(no_formula_reason(error))


def _not_costed(why: str) -> str:
    return f"not costed: {why}; the call itself ran and passed its checks"


class CallTally:
    """Counts the checked calls of every ``@typed_flops`` function and the dims they bound.

    Cheap per call (a dict update). Each distinct binding of a function's dims (``...``
    included) is costed once, by dry runs, when the test that made it ends
    (:meth:`settle`). Calls made by dry runs are not counted. It observes calls through
    ``typedflops.contract.function.add_call_observer``: every call whose arguments and return
    passed. Functions without a jaxtyping array annotation (checked for their plain hints
    only) have no dims to cost and are not counted. Where a dry run cannot cost a binding,
    the function's next calls are counted as they run (:mod:`.as_run`; :meth:`watch`
    counts a function's first call so).
    """

    def __init__(self) -> None:
        from .as_run import AsRun

        # One entry per function definition: a function decorated anew in each test (or
        # each iteration of a loop) is one row.
        self.entries: dict[tuple[str, str, int], _Entry] = {}
        self._costed: dict[int, bool] = {}
        self._remove: Callable[[], None] | None = None
        self.as_run = AsRun(self._measured, self._costs)

    def start(self) -> None:
        """Begin observing calls."""
        from ..contract.function import add_call_observer

        if self._remove is None:
            self._remove = add_call_observer(self.observe)

    def stop(self) -> None:
        """Stop observing calls (what was counted stays); no call is recorded any more."""
        self._pause()
        self.as_run.stop()

    def _pause(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None

    def watch(self, function: CheckedFunction[..., Any]) -> None:
        """Count ``function``'s first call as it runs (its dry runs come when the test
        ends); see :mod:`.as_run`."""
        self.as_run.watch(function, calls=1)

    def _costs(self, function: CheckedFunction[..., Any]) -> bool:
        costed = self._costed.get(id(function))
        if costed is None:
            costed = self._costed[id(function)] = _costs_anything(function)
        return costed

    def _entry(self, function: CheckedFunction[..., Any]) -> _Entry:
        key = (function.__module__, function.name, _first_line(function))
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(function)
        entry.function = function  # (the latest definition is the one still called)
        return entry

    def observe(
        self,
        function: CheckedFunction[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        state: CallState,
    ) -> None:
        """Count one call whose arguments passed the check, with the dims they bound."""
        if not self._costs(function):
            return
        from ..cost.engine.probes import call_dims, call_probe

        entry = self._entry(function)
        dims = call_dims(function, args, kwargs, state.sizes)
        binding = tuple(dims.items())
        count = entry.calls.get(binding, 0)
        entry.calls[binding] = count + 1
        if not count:
            try:
                entry.pending[binding] = call_probe(function, args, kwargs, state.sizes)
            except Exception as exc:  # a call the engine cannot describe: said, not raised
                entry.costs[binding] = no_formula_reason(exc)

    def _measured(
        self,
        function: CheckedFunction[..., Any],
        binding: Binding,
        flops: int,
        moved: int,
        uncounted: tuple[str, ...],
    ) -> None:
        """A call counted as it ran: its FLOPs, bytes and ops without a FLOP rule."""
        entry = self._entry(function)
        entry.as_run.setdefault(binding, []).append([flops, moved])
        entry.uncounted.setdefault(binding, {}).update(dict.fromkeys(uncounted))

    def settle(self) -> None:
        """Cost the bindings seen since the last call (dry runs), then let go. A function
        a dry run could not cost is watched (its next calls counted as they run); one whose
        every binding was costed no longer is."""
        observing = self._remove is not None
        self._pause()
        try:
            self.as_run.settle()
            for entry in self.entries.values():
                for binding, probe in entry.pending.items():
                    entry.costs[binding] = self._dry_run(entry, probe)
                entry.pending.clear()
                if any(isinstance(cost, str) for cost in entry.costs.values()):
                    self.as_run.watch(entry.function)
                elif self.as_run.watching(entry.function):
                    self.as_run.unwatch(entry.function)
        finally:
            if observing:
                self.start()

    @staticmethod
    def _dry_run(entry: _Entry, probe: Probe) -> Cost | str:
        """The cost of one binding, or why none: a function whose dry runs failed
        :data:`_DRY_RUNS_TRIED` times without one succeeding is not dry-run again (what
        stopped them, such as a body that reads values or an object held in ``self``,
        does not change with the sizes); its calls are counted as they run."""
        from ..cost.engine.dryrun import measure

        if entry.failed >= _DRY_RUNS_TRIED and not entry.costed:
            return next(cost for cost in reversed(entry.costs.values()) if isinstance(cost, str))
        try:
            cost = measure(probe)
        except Exception as exc:  # a body that cannot dry-run: why, in words
            entry.failed += 1
            return no_formula_reason(exc)
        entry.costed = True
        return cost

    def records(self) -> list[Record]:
        """Everything counted so far, as plain records (costed first)."""
        self.settle()
        found: list[Record] = []
        for (module, _, line), entry in self.entries.items():
            for binding, calls in entry.calls.items():
                cost = entry.costs.get(binding, "")
                record = Record(
                    module=module,
                    name=entry.name,
                    line=line,
                    binding=list(binding),
                    calls=calls,
                    formula=None,
                    flops=0,
                    exact=True,
                    uncounted=[],
                    assumed=[],
                    why="",
                    as_run=[],
                )
                if isinstance(cost, str):
                    record["why"] = cost
                    record["as_run"] = [list(pair) for pair in entry.as_run.get(binding, [])]
                    record["uncounted"] = list(entry.uncounted.get(binding, {}))
                else:
                    record["formula"] = str(cost.formula)
                    record["flops"] = cost.flops
                    record["exact"] = cost.exact
                    record["uncounted"] = list(cost.uncounted)
                    record["assumed"] = list(cost.assumed)
                found.append(record)
        return found


def _first_line(function: CheckedFunction[..., Any]) -> int:
    code = getattr(function.__wrapped__, "__code__", None)
    return code.co_firstlineno if code is not None else 0


def _binding_key(record: Record) -> tuple[Any, ...]:
    binding = tuple(
        (name, tuple(size) if isinstance(size, list) else size) for name, size in record["binding"]
    )
    return (record["module"], record["name"], record["line"], binding)


def merge(batches: Iterable[Iterable[Record]]) -> list[Record]:
    """Records of several processes (pytest-xdist workers) as one: the calls of the same
    function with the same dims add up."""
    merged: dict[tuple[Any, ...], Record] = {}
    for batch in batches:
        for record in batch:
            key = _binding_key(record)
            known = merged.get(key)
            if known is None:
                merged[key] = Record(**record)
                merged[key]["as_run"] = list(record["as_run"])
            else:
                known["calls"] += record["calls"]
                known["as_run"] += record["as_run"]
                for field in ("uncounted", "assumed"):
                    known[field] = list(dict.fromkeys([*known[field], *record[field]]))
                if known["formula"] is None and record["formula"] is not None:
                    calls = known["calls"]
                    known.update(record)
                    known["calls"] = calls
    return list(merged.values())


def _shortened(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with ``...`` saying so.

    >>> _shortened("batch=8, d_in=4, d_out=3", 16)
    'batch=8, d_in...'
    """
    return text if len(text) <= width else text[: width - 3] + "..."


def _size_text(size: Size | list[int]) -> str:
    if isinstance(size, int):
        return f"{size}"
    return "(" + ", ".join(f"{s}" for s in size) + ("," if len(size) == 1 else "") + ")"


def _binding_text(binding: Iterable[tuple[str, Any]]) -> str:
    return ", ".join(f"{n}={_size_text(s)}" for n, s in binding) or "-"


def rows(records: list[Record]) -> tuple[list[list[str]], list[str]]:
    """One row per function and binding (functions sorted by name): name, calls, dims,
    formula, FLOPs per call, FLOPs over the calls; and the notes under the table."""
    from ..text import format_count

    functions: dict[tuple[str, str, int], list[Record]] = {}
    for record in records:
        functions.setdefault((record["module"], record["name"], record["line"]), []).append(record)
    order = sorted(functions, key=lambda key: (key[1], key[0], key[2]))
    names = [key[1] for key in order]
    qualified = [f"{key[0]}.{key[1]}" for key in order]
    table_rows: list[list[str]] = []
    notes: list[str] = []
    uncounted: list[str] = []
    assumed: list[str] = []
    inexact = partial = False
    for key in order:
        module, name, line = key
        label_name = name
        if names.count(name) > 1:  # same name, other modules (or other definitions)
            label_name = f"{module}.{name}"
            if qualified.count(label_name) > 1:
                label_name += f":{line}"
        found = functions[key]
        for index, record in enumerate(found[:_MAX_DIMS_SHOWN]):
            label = label_name if index == 0 else ""
            dims = _shortened(_binding_text(record["binding"]), _MAX_DIMS_WIDTH)
            calls = record["calls"]
            if record["formula"] is None:
                row, note = _not_costed_row(name, record)
                table_rows.append([label, str(calls), dims, *row])
                notes.append(note)
                uncounted.extend(record["uncounted"])
                partial |= 0 < len(record["as_run"]) < calls
                continue
            inexact |= not record["exact"]
            uncounted.extend(record["uncounted"])
            assumed.extend(record["assumed"])
            mark = "" if record["exact"] else "~ "
            table_rows.append(
                [
                    label,
                    str(calls),
                    dims,
                    mark + record["formula"],
                    format_count(record["flops"]),
                    format_count(calls * record["flops"]),
                ]
            )
        if len(found) > _MAX_DIMS_SHOWN:
            more = found[_MAX_DIMS_SHOWN:]
            count = sum(record["calls"] for record in more)
            table_rows.append(["", str(count), f"+{len(more)} more dims", "", "", ""])
    if uncounted:
        ops = ", ".join(dict.fromkeys(uncounted))
        notes.append(f"uncounted ops (ran, no FLOP rule): {ops}")
    notes += [f"values not known: {note}" for note in dict.fromkeys(assumed)]
    if inexact:
        notes.append(INEXACT_NOTE)
    if partial:
        notes.append("as run (k of n): FLOPs over the n calls taken at the mean of the k counted")
    return table_rows, notes


def _spread(values: list[int]) -> str:
    """``1.20k`` when every value is the same, ``1.20k-3.40k`` otherwise."""
    from ..text import format_count

    low, high = min(values), max(values)
    return format_count(low) if low == high else f"{format_count(low)}-{format_count(high)}"


def _not_costed_row(name: str, record: Record) -> tuple[list[str], str]:
    """The formula, FLOPs/call and FLOPs cells of a binding no dry run could cost, and its
    note: the calls counted as they ran (where some were), and why there is no formula."""
    from ..text import format_count

    dims = _binding_text(record["binding"])
    why, calls, counted = record["why"], record["calls"], record["as_run"]
    if not counted:
        return ["?", "?", "?"], f"? {name}({dims}): {_not_costed(why)}"
    flops = [pair[0] for pair in counted]
    moved = [pair[1] for pair in counted]
    if len(counted) >= calls:
        shown, total = "as run", format_count(sum(flops))
    else:  # the calls not counted taken at the mean of those counted
        shown = f"as run ({len(counted)} of {calls})"
        total = "~ " + format_count(sum(flops) * calls // len(counted))
    note = (
        f"as run {name}({dims}): {_spread(flops)} FLOPs, {_spread(moved)} bytes per call, "
        f"counted while {_calls(len(counted))} ran; no formula, as {why}"
    )
    return [shown, _spread(flops), total], note


def _calls(count: int) -> str:
    return "the call" if count == 1 else f"{count} calls"


def table(records: list[Record]) -> list[str]:
    """The report as lines of text."""
    found, notes = rows(records)
    if not found:
        return ["no @typed_flops function ran with checks on"]
    header = ["function", "calls", "dims", "formula", "FLOPs/call", "FLOPs"]
    return [*text_table(header, found, right={1, 4, 5}).splitlines(), *notes]
