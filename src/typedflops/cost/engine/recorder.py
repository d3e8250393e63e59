"""``record()``: the decorated calls and ops a block ran, as a tree of rows.

Each row is one decorated function called with one signature (shapes, dtypes, which
tensors require grad, the module, non-tensor arguments) under one parent row. Its first
call is counted op by op; later calls with the same signature run with counting paused and
only add to the row's call count, so a recording costs memory per distinct row, not per
call, and a repeated call costs little more than an unrecorded one. Nothing keeps a user's
tensor: events hold shapes, and a row keeps a weak reference to its module.

Costs are computed when asked for: counts from what ran, formulas fitted by dry runs of
the row's function at its dims (see :mod:`.dryrun`), reused for rows of the same function
that differ only in sizes when the formula gives their counts.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import sympy
import torch

from ...contract.function import CheckedFunction
from ..types import Cost, OpCost, Term
from .backward import backward_of
from .counter import counting
from .dryrun import Probe, measure
from .events import Event
from .fit import Size, evaluate, size_value, total
from .frames import Frame, current_frame, in_frame
from .probes import call_dims, call_probe, stub
from .session import Session, declared_event
from .signature import signature, signature_without_sizes

__all__ = ["RecordSession", "Row", "merged_total", "torch_counts"]


class Row:
    """One decorated function with one signature under one parent: its calls and costs."""

    def __init__(self, function: str, parent: Row | None, key: Any = None) -> None:
        self.function = function
        self.parent = parent
        self.key = key
        self.children: dict[Any, Row] = {}
        self.calls = 0
        self.events: list[Event] = []
        self.dims: dict[str, Size] = {}
        self.complete = False
        # Its descendants' calls per call of it: taken at its second call (after one call
        # each descendant's count is its count per call).
        self.per_call: list[tuple[Row, int]] | None = None
        # One clock per session: any change ticks it, and a cost computed earlier is stale.
        self.clock: list[int] = parent.clock if parent is not None else [0]
        self._cost_at = -1
        self.probe: Callable[[], Probe] | None = None
        self.fitting_key: Any = None
        self.measurement: Any = None
        self.fixed: Cost | None = None
        self._cost: Cost | None = None

    @property
    def path(self) -> tuple[str, ...]:
        """The functions this row's calls ran in, outermost first, ending with its own."""
        found: list[str] = []
        row: Row | None = self
        while row is not None and row.parent is not None:
            found.append(row.function)
            row = row.parent
        return tuple(reversed(found))

    def descendants(self) -> Iterator[Row]:
        """Every row below this one."""
        for child in self.children.values():
            yield child
            yield from child.descendants()

    def visible_children(self) -> list[Row]:
        """Children that completed at least one call."""
        return [child for child in self.children.values() if child.calls]

    def add_cached_call(self) -> None:
        """One more call with the same signature: this row and its subtree, once more."""
        if self.per_call is None:
            self.per_call = [(desc, desc.calls) for desc in self.descendants()]
        self.calls += 1
        for row, count in self.per_call:
            row.calls += count
        self._invalidate()

    def _invalidate(self) -> None:
        self.clock[0] += 1

    def own_counts(self) -> tuple[int, int, int, int]:
        """Forward, backward, bytes read and written of the row's own ops, per call."""
        forward = sum(event.flops for event in self.events)
        backward = sum(_backward_flops(event) for event in self.events)
        read = sum(event.bytes_read for event in self.events)
        written = sum(event.bytes_written for event in self.events)
        return forward, backward, read, written

    def counts(self) -> tuple[int, int, int, int]:
        """Forward, backward, bytes read and written over all calls, children included."""
        if self.fixed is not None:
            cost = self.fixed
            values = (cost.flops, cost.backward_flops, cost.bytes_read, cost.bytes_written)
            return tuple(self.calls * v for v in values)  # type: ignore[return-value]
        own = self.own_counts()
        found = [self.calls * value for value in own]
        for child in self.visible_children():
            for index, value in enumerate(child.counts()):
                found[index] += value
        return found[0], found[1], found[2], found[3]

    def uncounted(self) -> tuple[str, ...]:
        """Ops of this row and its subtree that ran without a rule."""
        found: list[str] = []
        if self.fixed is not None:
            found.extend(self.fixed.uncounted)
        for event in self.events:
            if not event.counted:
                found.append(event.op)
            if event.needs_grad:
                found.extend(backward_of(event).uncounted)
        for child in self.visible_children():
            found.extend(child.uncounted())
        return tuple(dict.fromkeys(found))

    def cost(self) -> Cost:
        """The cost of one call, in the row's own dim names (fitted formulas when they give
        this row's counts, else the counts, marked not exact)."""
        if self._cost is None or self._cost_at != self.clock[0]:
            self._cost = self._compute_cost()
            self._cost_at = self.clock[0]
        return self._cost

    def _compute_cost(self) -> Cost:
        if self.fixed is not None:
            return self.fixed
        calls = max(self.calls, 1)
        forward, backward, read, written = (value // calls for value in self.counts())
        fitted = _fitted_cost(self)
        if fitted is not None:
            values = {name: size_value(size) for name, size in fitted.dims.items()}
            if (
                evaluate(fitted.formula, values) == forward
                and evaluate(fitted.backward_formula, values) == backward
            ):
                return Cost(
                    forward=Term(forward, fitted.formula, fitted.forward.exact),
                    backward=Term(backward, fitted.backward_formula, fitted.backward.exact),
                    dims=fitted.dims,
                    bytes_read=read,
                    bytes_written=written,
                    ops=fitted.ops,
                    uncounted=self.uncounted(),
                    function=self.function,
                    fixed=fitted.fixed,
                )
        return Cost(
            forward=Term.of_count(forward, exact=not self.dims),
            backward=Term.of_count(backward, exact=not self.dims),
            dims={name: size_value(size) for name, size in self.dims.items()},
            bytes_read=read,
            bytes_written=written,
            ops=tuple(_op_costs(self)),
            uncounted=self.uncounted(),
            function=self.function,
        )


def _backward_flops(event: Event) -> int:
    return backward_of(event).flops if event.needs_grad else 0


def _op_costs(row: Row) -> Iterator[OpCost]:
    """The row's ops (its own, then its children's), grouped by the call that ran them."""
    events = row.events
    start = 0
    while start < len(events):
        end = start + 1
        while end < len(events) and events[end].group.serial == events[start].group.serial:
            end += 1
        chunk = events[start:end]
        flops = sum(e.flops for e in chunk)
        backward = sum(_backward_flops(e) for e in chunk)
        free = all(e.entry is None and e.counted for e in chunk)
        yield OpCost(
            op=chunk[0].group.name,
            pattern=chunk[0].group.pattern,
            forward=Term.of_count(flops),
            backward=Term.of_count(backward),
            bytes_read=sum(e.bytes_read for e in chunk),
            bytes_written=sum(e.bytes_written for e in chunk),
            view=all(e.view for e in chunk) if free else None,
            path=chunk[0].path,
        )
        start = end
    for child in row.visible_children():
        yield from child.cost().ops


# Fitted costs by (function, what the row's call was besides its sizes): rows of one
# function that differ only in sizes reuse one fit when its formula gives their counts.
_FITS: dict[Any, list[Cost]] = {}


def _fitted_cost(row: Row) -> Cost | None:
    if row.probe is None:
        return None
    key = row.fitting_key
    dims = {name: size_value(size) for name, size in row.dims.items()}
    for fitted in _FITS.get(key, []) if key is not None else []:
        if fitted.exact and set(fitted.dims) >= set(dims):
            values = {**fitted.dims, **dims}
            return Cost(
                forward=Term(int(fitted.forward.at(values)), fitted.formula),
                backward=Term(int(fitted.backward.at(values)), fitted.backward_formula),
                dims=values,
                bytes_read=fitted.bytes_read,
                bytes_written=fitted.bytes_written,
                ops=(),
                uncounted=fitted.uncounted,
                function=fitted.function,
                fixed=fitted.fixed,
            )
    try:
        fitted = measure(row.probe())
    except Exception:
        return None
    if key is not None:
        _FITS.setdefault(key, []).append(fitted)
    return fitted


class RecordSession(Session):
    """The session of one ``record()`` block."""

    def __init__(self) -> None:
        self.root = Row("<record>", None)
        self.root.calls = 1
        self.root.complete = True
        self.frame = Frame(self, (), None, self.root.events)
        self.frame.row = self.root

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Count the ops run inside the block into this session."""
        with counting(self) as mode, in_frame(self.frame):
            self.mode = mode
            try:
                yield
            finally:
                self.mode = None

    def begin(
        self,
        frame: Frame,
        fn: CheckedFunction[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        *,
        fresh: bool = False,
    ) -> tuple[str, Frame | None, Row | None]:
        """Open a decorated call inside ``frame``: ``("count", frame, row)`` to count it into
        its row, ``("cached", None, row)`` for a row whose count is known (the body then runs
        with counting out of the way), ``("inline", frame, None)`` inside a declared call.

        ``fresh``: count into a row of its own, merged at :meth:`finish` (an async call,
        which other calls of the same row may overlap).
        """
        if frame.declared or frame.inside_declared():
            return "inline", frame, None
        parent: Row = frame.row
        key = (id(fn), signature(args, kwargs))
        row = parent.children.get(key)
        if fresh:
            row = Row(fn.name, parent, key)
        elif row is not None and row.complete:
            return "cached", None, row
        elif row is None:
            row = Row(fn.name, parent, key)
            parent.children[key] = row
        row.events.clear()
        child = Frame(self, (*frame.path, fn.name), frame, row.events, fn.declared is not None)
        child.row = row
        return "count", child, row

    def finish(
        self,
        kind: str,
        row: Row | None,
        frame: Frame | None,
        fn: CheckedFunction[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        bound: Mapping[str, Size],
    ) -> None:
        """Close a call that returned: its row's dims, probe and call count."""
        if kind == "inline" or row is None:
            return
        if kind == "cached":
            row.add_cached_call()
            return
        sizes = dict(bound)
        row.dims = call_dims(fn, args, kwargs, sizes)
        declared = fn.declared
        if declared is not None:
            value = int(evaluate(declared, {k: size_value(v) for k, v in row.dims.items()}))
            assert frame is not None
            row.events.append(declared_event(fn.name, value, frame))
        row.probe = _probe_factory(fn, args, kwargs, sizes)
        row.fitting_key = (id(fn), signature_without_sizes(args, kwargs))
        row.calls = 1
        row.complete = True
        parent = row.parent
        assert parent is not None
        if parent.children.get(row.key) is not row:  # a fresh row: merge it or keep it apart
            known = parent.children.get(row.key)
            if known is not None and known.complete and known.counts() == row.counts():
                known.add_cached_call()
            else:
                parent.children[row.key if known is None else (row.key, id(row))] = row
        row._invalidate()

    def add_measured(self, name: str, cost: Cost, measurement: Any) -> None:
        """A benchmarked call: one row with its dry-run cost and its measurement."""
        frame = current_frame()
        parent = frame.row if frame is not None and frame.session is self else self.root
        row = Row(name, parent)
        row.fixed = cost
        row.dims = dict(cost.dims)
        row.measurement = measurement
        row.calls = 1
        row.complete = True
        parent.children[(name, id(row))] = row
        row._invalidate()


def _probe_factory(
    fn: CheckedFunction[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    bound: Mapping[str, Size],
) -> Callable[[], Probe]:
    """Build the row's probe now (it keeps shapes, not tensors) and hand it out later."""
    module = args[0] if args and isinstance(args[0], torch.nn.Module) else None
    reference = weakref.ref(module) if module is not None else None
    rest = args[1:] if module is not None else args
    shapes = tuple(stub(a) for a in rest)
    named = {k: stub(v) for k, v in kwargs.items()}

    def make() -> Probe:
        owner = reference() if reference is not None else None
        if reference is not None and owner is None:
            raise RuntimeError(f"{fn.name}: its module no longer exists")
        positional = (owner, *shapes) if reference is not None else shapes
        return call_probe(fn, positional, named, bound)

    return make


def merged_total(rows: list[Row], loose: Row) -> Cost:
    """The cost of a session: every top-level row times its calls, loose ops added; dims
    that mean different sizes in different rows are renamed apart (``d_in``, ``d_in_2``)."""
    dims: dict[str, int] = {}
    formulas: list[sympy.Expr] = []
    backwards: list[sympy.Expr] = []
    ops: list[OpCost] = []
    exact = True
    for row in rows:
        cost = row.cost()
        renaming: dict[sympy.Symbol, sympy.Symbol] = {}
        for name, value in cost.dims.items():
            target = name
            suffix = 2
            while target in dims and dims[target] != value:
                target = f"{name}_{suffix}"
                suffix += 1
            dims[target] = value
            if target != name:
                renaming[sympy.Symbol(name)] = sympy.Symbol(target)
        formulas.append(row.calls * cost.formula.xreplace(renaming))
        backwards.append(row.calls * cost.backward_formula.xreplace(renaming))
        ops.extend(cost.ops)
        exact &= cost.exact
    forward, backward, read, written = loose.own_counts()
    formulas.append(sympy.Integer(forward))
    backwards.append(sympy.Integer(backward))
    ops.extend(_op_costs(_without_children(loose)))
    flops = forward + sum(r.calls * r.cost().flops for r in rows)
    backward_flops = backward + sum(r.calls * r.cost().backward_flops for r in rows)
    formula, backward_formula = total(formulas), total(backwards)
    if evaluate(formula, dims) != flops or evaluate(backward_formula, dims) != backward_flops:
        formula, backward_formula, exact = (
            sympy.Integer(flops),
            sympy.Integer(backward_flops),
            False,
        )
    used = {str(s) for s in formula.free_symbols | backward_formula.free_symbols}
    uncounted = [*loose.uncounted()] if not loose.children else list(_own_uncounted(loose))
    for row in rows:
        uncounted.extend(row.cost().uncounted)
    return Cost(
        forward=Term(flops, formula, exact),
        backward=Term(backward_flops, backward_formula, exact),
        dims={name: value for name, value in dims.items() if name in used or not used},
        bytes_read=read + sum(r.calls * r.cost().bytes_read for r in rows),
        bytes_written=written + sum(r.calls * r.cost().bytes_written for r in rows),
        ops=tuple(ops),
        uncounted=tuple(dict.fromkeys(uncounted)),
        function=None,
    )


def _own_uncounted(row: Row) -> Iterator[str]:
    for event in row.events:
        if not event.counted:
            yield event.op
        if event.needs_grad:
            yield from backward_of(event).uncounted


def _without_children(row: Row) -> Row:
    bare = Row(row.function, None)
    bare.events = row.events
    return bare


def torch_counts(root: Row) -> tuple[int, int]:
    """Forward and backward FLOPs of the kernels ``FlopCounterMode`` has formulas for, over
    every call recorded under ``root`` (a parity check compares exactly these)."""
    forward = backward = 0

    def visit(row: Row, calls: int) -> None:
        nonlocal forward, backward
        for event in row.events:
            if event.torch_counted:
                forward += calls * event.flops
            if event.needs_grad:
                found = backward_of(event).events
                backward += calls * sum(e.flops for e in found if e.torch_counted)
        for child in row.visible_children():
            visit(child, child.calls)

    visit(root, 1)
    return forward, backward
