"""``record()``'s rows and their costs, computed when asked for.

A :class:`Row` is one work (see :mod:`.works`: a decorated function that did the same work
on every call it counts) under one parent row, with its number of calls. Its counts are
the sums of what its calls ran. Its formulas come from dry runs of the function at the
row's dims (see :mod:`.dryrun`), taken only where they give the row's own counts: one fit
serves every row of a function called alike (same non-tensor arguments, modules built
alike) whose counts it gives; a row whose counts no fit gives keeps its counts as numbers,
marked not exact. The total adds every row and every op outside a decorated call.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from typing import Any, cast

import sympy

from ..types import Cost, OpCost, Term
from .counts import Counts
from .dryrun import measure
from .events import Event
from .fit import evaluate, size_value, total
from .probes import WorkProbe
from .ran_rows import rows_as_ran
from .runs import Probe, Runner
from .state_read import as_called
from .works import RecordSession, Work

__all__ = [
    "Counts",
    "Row",
    "counts_of",
    "loose_counts",
    "merged_total",
    "torch_counts",
    "work_cost",
]

# At most this many fits per function called alike; rows beyond keep numbers.
_FITS_PER_KEY = 4
# A call of more ops than this is not fitted: its dry runs would take as long as an
# estimate of it, several times over (a forward through 10,000 blocks); its counts stay
# numbers, marked not exact.
FIT_LIMIT = 20_000
# A total with more distinct (formula, dims) terms than this is given as a number.
_TERMS = 24


def counts_of(work: Work) -> Counts:
    """The counts of one call of ``work`` (kept on it: a work does not change)."""
    if work._counts is not None:
        return cast(Counts, work._counts)
    # Depth-first without recursion: a recursive function makes works nested as deep.
    pending: list[tuple[Work, bool]] = [(work, False)]
    while pending:
        current, ready = pending.pop()
        if current._counts is not None:
            continue
        children = current.children()
        if not ready:
            pending.append((current, True))
            pending.extend((child, False) for child, _ in children if child._counts is None)
            continue
        counts = Counts()
        if current.fixed is not None:
            cost = current.fixed
            counts.forward, counts.backward = cost.flops, cost.backward_flops
            counts.read, counts.written = cost.bytes_read, cost.bytes_written
            counts.matmul, counts.recompute = cost.matmul_flops, cost.recompute_flops
            counts.uncounted.update(dict.fromkeys(cost.uncounted))
            counts.assumed.update(dict.fromkeys(cost.assumed))
        for item in current.items:
            if type(item) is tuple:
                for event in item[2]:
                    counts.add_event(event)
        for child, times in children:
            counts.add(child._counts, times)
        current._counts = counts
    return cast(Counts, work._counts)


def _op_costs(work: Work, path: tuple[str, ...], times: int = 1) -> Iterator[OpCost]:
    """The work's op groups (its own, then its calls'), ``times`` calls of it."""
    for item in work.items:
        if type(item) is tuple:
            yield _op_cost(item, path, times)
    for child, count in work.children():
        yield from _op_costs(child, (*path, child.function), times * count)


def _placed_ops(
    work: Work, path: tuple[str, ...], times: int
) -> Iterator[tuple[OpCost, tuple[Event, ...], int]]:
    """:func:`_op_costs`, each with its events and how many times they ran."""
    for item in work.items:
        if type(item) is tuple:
            yield _op_cost(item, path, times), item[2], times
    for child, count in work.children():
        yield from _placed_ops(child, (*path, child.function), times * count)


def _op_cost(
    group: tuple[str, str | None, tuple[Event, ...]], path: tuple[str, ...], times: int
) -> OpCost:
    name, pattern, events = group
    counts = Counts()
    for event in events:
        counts.add_event(event, times)
    free = all(e.entry is None and e.counted for e in events)
    return OpCost(
        op=name,
        pattern=pattern,
        forward=Term.of_count(counts.forward),
        backward=Term.of_count(counts.backward),
        bytes_read=counts.read,
        bytes_written=counts.written,
        view=all(e.view for e in events) if free else None,
        path=path,
    )


# Fits by what a row's call was besides its sizes (the function, its non-tensor arguments,
# its module's structure, grad mode), across records, each with the ops of the call it was
# fitted for: the oldest go first past the bound.
_FITS: OrderedDict[Any, list[tuple[Cost, frozenset[str]]]] = OrderedDict()
_FITS_KEYS = 1024
_FITS_LOCK = threading.Lock()


def _fits(key: Any) -> list[tuple[Cost, frozenset[str]]]:
    if key is None:
        return []
    with _FITS_LOCK:  # (records in several threads share them)
        found = _FITS.get(key)
        if found is None:
            found = _FITS[key] = []
            if len(_FITS) > _FITS_KEYS:
                _FITS.popitem(last=False)
        else:
            _FITS.move_to_end(key)
        return found


def _fit_for(work: Work, counts: Counts) -> tuple[Cost, dict[str, int]] | None:
    """A fitted cost whose formulas give this work's counts at its dims, and the values
    of its symbols (the work's dims and the fit's own names). A fit made for another call
    serves only a call that ran the same ops (by name): calls whose bodies read another
    global or closure may run other ops whose counts coincide at these sizes."""
    if work.probe is None or counts.events > FIT_LIMIT:
        return None
    dims = {name: size_value(size) for name, size in work.dims.items()}
    ops = op_names(work)
    known = _fits(work.fitting)
    for candidate, fitted_ops in known:
        if fitted_ops != ops:
            continue
        found = _reproduces(candidate, dims, counts)
        if found is not None:
            return candidate, found
    if len(known) >= _FITS_PER_KEY:
        return None
    source = work.probe
    if isinstance(source, WorkProbe) and not source.reads_alike():
        # what the body reads has changed since the call (a global, its module's mode or
        # weights): a fit now would be of another body; the counts stay numbers
        return None
    fitted: Cost | None
    try:
        probe = work.probe()
        with as_called(source.torch if isinstance(source, WorkProbe) else None):
            # (torch's settings as the call ran: default dtype, kernels allowed, autocast)
            fitted = measure(probe)
            alike = _runs_alike(work, probe)
        if not alike:
            fitted = None  # the body runs other ops now (a global it reads has changed)
    except Exception:
        fitted = None
    if work.fitting is not None:
        known.append((fitted if fitted is not None else _FAILED, ops))
    if fitted is None:
        return None
    found = _reproduces(fitted, dims, counts)
    return None if found is None else (fitted, found)


def op_names(work: Work) -> frozenset[str]:
    """The names of the ops one call of ``work`` ran, in it and in the calls it made."""
    names: set[str] = set()
    pending = [work]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for item in current.flat:
            if type(item) is Work:
                pending.append(item)
            elif type(item) is Event:
                names.add(item.op)
    return frozenset(names)


def _runs_alike(work: Work, probe: Probe) -> bool:
    """Whether a dry run of ``probe`` at the call's own sizes runs ops of the FLOPs one call
    of ``work`` ran, op by op (the same multiset of nonzero counts: two products of 32
    FLOPs are not one of 64)."""
    start: dict[str, Any] = dict(probe.dims)
    rebuild = probe.rebuild
    if rebuild is not None and not rebuild.declared:
        start.update({rebuild.key(name): size for name, size in rebuild.sizes.items()})
    start.update(probe.pinned)
    dry = Counter(e.flops for e in Runner(probe).base(start).events if e.flops)
    return dry == _event_counts(work)


def _event_counts(work: Work) -> Counter[int]:
    """How many ops of each nonzero FLOP count one call of ``work`` ran, calls included."""
    found: Counter[int] = Counter()
    pending: list[tuple[Work, int]] = [(work, 1)]
    while pending:
        current, times = pending.pop()
        for item in current.flat:
            if type(item) is Event and item.flops:
                found[item.flops] += times
        pending.extend((child, times * count) for child, count in current.children())
    return found


# A fit that could not be made: counts against the bound, gives no row's counts.
_FAILED = Cost(
    forward=Term.of_count(-1),
    backward=Term.of_count(-1),
    dims={},
    bytes_read=0,
    bytes_written=0,
)


def _reproduces(fitted: Cost, dims: dict[str, int], counts: Counts) -> dict[str, int] | None:
    """The values of the fit's symbols where every FLOP term of the fit gives the call's
    count (forward, backward, of matrix products, run again), else None."""
    values = {**fitted.dims, **dims}
    for formula, count in (
        (fitted.formula, counts.forward),
        (fitted.backward_formula, counts.backward),
        (fitted.matmul_formula, counts.matmul),
        (fitted.recompute_formula, counts.recompute),
    ):
        if _value(formula, values) != count:
            return None
    return values


def _value(formula: sympy.Expr, values: Mapping[str, int]) -> Any:
    """``formula`` at ``values``, exactly (None where a symbol has no value): a formula
    compiled once to integer arithmetic, so that checking it on a thousand rows is quick."""
    try:
        return _compiled(formula)(values)
    except KeyError:
        return None


@functools.lru_cache(maxsize=1024)
def _compiled(formula: sympy.Expr) -> Callable[[Mapping[str, int]], Any]:
    if formula.is_Integer:
        number = int(formula)
        return lambda values: number
    if formula.is_Rational:
        fraction = Fraction(int(formula.p), int(formula.q))
        return lambda values: fraction
    if formula.is_Symbol:
        name = str(formula)
        return lambda values: values[name]
    parts = [_compiled(arg) for arg in formula.args]
    if formula.is_Add:
        return lambda values: sum(part(values) for part in parts)
    if formula.is_Mul:

        def product(values: Mapping[str, int]) -> Any:
            found: Any = 1
            for part in parts:
                found = found * part(values)
            return found

        return product
    if formula.is_Pow and formula.args[1].is_Integer and int(formula.args[1]) >= 0:
        base, exponent = parts[0], int(formula.args[1])
        return lambda values: base(values) ** exponent
    slow = formula  # anything else (floor, a negative power): sympy itself

    def substituted(values: Mapping[str, int]) -> Any:
        found = evaluate(slow, values)
        if found.free_symbols:
            raise KeyError(str(found))
        return found

    return substituted


def work_cost(work: Work) -> Cost:
    """The cost of one call of ``work``: its counts, with fitted formulas where one gives
    them (see the module), else its counts as numbers (not exact where it has dims)."""
    if work._cost is not None:
        return work._cost
    if work.fixed is not None:
        work._cost = work.fixed
        return work.fixed
    counts = counts_of(work)
    dims = {name: size_value(size) for name, size in work.dims.items()}
    ops = tuple(_op_costs(work, (work.function,)))
    found = _fit_for(work, counts)
    if found is None:
        cost = _numbers(counts, dims, ops, work.function, exact=not dims)
    else:
        fitted, values = found
        matmul = _formula_or_count(fitted.matmul_formula, values, counts.matmul)
        recompute = _formula_or_count(fitted.recompute_formula, values, counts.recompute)
        activation = _value(fitted.activation_formula, values)
        known = activation is not None and activation == int(activation)
        activation_bytes = int(activation) if known else 0
        formulas = (fitted.formula, fitted.backward_formula, matmul, recompute)
        used = {str(s) for f in formulas for s in f.free_symbols}
        if known:
            used |= {str(s) for s in fitted.activation_formula.free_symbols}
        shown = {**dims, **{name: values[name] for name in sorted(used - set(dims))}}
        activation_term = (
            Term(activation_bytes, fitted.activation_formula, fitted.activation.exact)
            if known
            else Term(0, sympy.Integer(0))
        )
        cost = Cost(
            forward=Term(counts.forward, fitted.formula, fitted.forward.exact),
            backward=Term(counts.backward, fitted.backward_formula, fitted.backward.exact),
            dims=shown,
            bytes_read=counts.read,
            bytes_written=counts.written,
            ops=ops,
            uncounted=tuple(counts.uncounted),
            assumed=tuple(counts.assumed),
            function=work.function,
            matmul=_term(matmul, counts.matmul, fitted.matmul),
            recompute=_term(recompute, counts.recompute, fitted.recompute),
            activation=activation_term,
            fixed={name: size for name, size in fitted.fixed.items() if name not in used},
        )
    work._cost = cost
    return cost


def _formula_or_count(formula: sympy.Expr, values: dict[str, int], count: int) -> sympy.Expr:
    return formula if _value(formula, values) == count else sympy.Integer(count)


def _term(formula: sympy.Expr, count: int, fitted: Term) -> Term:
    """``count`` with ``formula`` (the fit's, or the count where the fit's gave another),
    exact where it is the fit's formula and the fit's was."""
    return Term(count, formula, fitted.exact and formula == fitted.formula)


def _numbers(
    counts: Counts, dims: dict[str, int], ops: tuple[OpCost, ...], function: str | None, exact: bool
) -> Cost:
    return Cost(
        forward=Term.of_count(counts.forward, exact=exact),
        backward=Term.of_count(counts.backward, exact=exact),
        dims=dims,
        bytes_read=counts.read,
        bytes_written=counts.written,
        ops=ops,
        uncounted=tuple(counts.uncounted),
        assumed=tuple(counts.assumed),
        function=function,
        matmul=Term.of_count(counts.matmul, exact=exact),
        recompute=Term.of_count(counts.recompute, exact=exact),
    )


class Row:
    """One work under one parent row: its calls, dims and cost per call."""

    def __init__(self, work: Work, calls: int, parent: Row | None = None) -> None:
        self.work = work
        self.calls = calls
        self.parent = parent
        self._children: list[Row] | None = None

    @property
    def function(self) -> str:
        """The function's name."""
        return self.work.function

    @property
    def dims(self) -> dict[str, Any]:
        """The dims its calls bound."""
        return self.work.dims

    @property
    def measurement(self) -> Any:
        """A benchmarked call's measurement (None for others)."""
        return self.work.measurement

    @property
    def path(self) -> tuple[str, ...]:
        """The functions this row's calls ran in, outermost first, ending with its own."""
        found: list[str] = []
        row: Row | None = self
        while row is not None:
            found.append(row.function)
            row = row.parent
        return tuple(reversed(found))

    def visible_children(self) -> list[Row]:
        """The rows of the calls its calls made, in the order of their first call."""
        if self._children is None:
            self._children = [
                Row(child, self.calls * times, self) for child, times in self.work.children()
            ]
        return self._children

    def descendants(self) -> Iterator[Row]:
        """Every row below this one."""
        for child in self.visible_children():
            yield child
            yield from child.descendants()

    def cost(self) -> Cost:
        """The cost of one of its calls, in the function's own dim names."""
        cost = work_cost(self.work)
        if self.parent is None or not cost.ops:
            return cost
        prefix = self.path[:-1]
        ops = tuple(dataclasses.replace(op, path=(*prefix, *op.path)) for op in cost.ops)
        return dataclasses.replace(cost, ops=ops)


def merged_total(rows: list[Row], session: RecordSession) -> Cost:
    """The cost of a record: every top-level row times its calls, and the ops run outside
    any decorated call; dims that mean different sizes in different rows are renamed apart
    (``d_in``, ``d_in_2``) in every term alike. With many distinct rows the formulas are the
    counts. Where autograd's engine ran inside the record, each op's backward in the
    breakdown is what ran for it (see :mod:`.ran_rows`)."""
    counts = Counts()
    placed: list[tuple[OpCost, tuple[Event, ...], int]] = []
    for row in rows:
        counts.add(counts_of(row.work), row.calls)
        placed.extend(_placed_ops(row.work, (row.function,), row.calls))
    for group, times in session.loose_groups().items():
        placed.append((_op_cost(group, (), times), group[2], times))
    ran = session.backward_ran
    ops = list(rows_as_ran(placed, ran) if ran.ran else (op for op, _, _ in placed))
    counts.add(loose_counts(session))
    distinct: set[tuple[Any, ...]] = set()
    costs = [(row, work_cost(row.work)) for row in rows]
    for _, cost in costs:
        distinct.add((cost.formula, cost.backward_formula, tuple(cost.dims.items())))
    many = len(distinct) > _TERMS
    renamings, dims = _renamings(costs)
    found = {
        name: _summed_term(costs, renamings, dims, name, count, many)
        for name, count in (
            ("forward", counts.forward),
            ("backward", counts.backward),
            ("matmul", counts.matmul),
            ("recompute", counts.recompute),
            ("activation", _summed(costs, counts)),
        )
    }
    used = {str(s) for term in found.values() for s in term.formula.free_symbols}
    return Cost(
        forward=found["forward"],
        backward=found["backward"],
        dims={name: value for name, value in dims.items() if name in used},
        bytes_read=counts.read,
        bytes_written=counts.written,
        ops=tuple(ops),
        uncounted=tuple(counts.uncounted),
        assumed=tuple(counts.assumed),
        function=None,
        matmul=found["matmul"],
        recompute=found["recompute"],
        activation=found["activation"],
    )


def _renamings(
    costs: list[tuple[Row, Cost]],
) -> tuple[list[dict[sympy.Symbol, sympy.Symbol]], dict[str, int]]:
    """Each row's renaming of its dims, so that a name means one size across the record
    (``d_in``, ``d_in_2``), and the sizes of the names."""
    dims: dict[str, int] = {}
    renamings: list[dict[sympy.Symbol, sympy.Symbol]] = []
    for _, cost in costs:
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
        renamings.append(renaming)
    return renamings, dims


def _summed_term(
    costs: list[tuple[Row, Cost]],
    renamings: list[dict[sympy.Symbol, sympy.Symbol]],
    dims: dict[str, int],
    name: str,
    count: int,
    many: bool,
) -> Term:
    """The record's ``name`` term: the rows' formulas, renamed apart, times their calls,
    plus what ran outside the rows as a number; exact where each row's is and what ran
    outside has no dims. With many distinct rows (``many``), the count."""
    exact = all(cost.terms[name].exact for _, cost in costs)
    if many:
        return Term.of_count(count, exact=exact and all(not cost.dims for _, cost in costs))
    parts: list[sympy.Expr] = []
    rows = 0
    for (row, cost), renaming in zip(costs, renamings, strict=True):
        term = cost.terms[name]
        parts.append(row.calls * term.formula.xreplace(renaming))
        rows += row.calls * term.count
    parts.append(sympy.Integer(count - rows))
    formula = total(parts)
    if evaluate(formula, dims) != count:
        return Term.of_count(count, exact=False)
    return Term(count, formula, exact)


def _summed(costs: list[tuple[Row, Cost]], counts: Counts) -> int:
    """Activation bytes of the rows' dry runs, times their calls."""
    return sum(row.calls * cost.activation_bytes for row, cost in costs)


def loose_counts(session: RecordSession) -> Counts:
    """What a record's ops outside any decorated call ran (making the inputs, a loss)."""
    counts = Counts()
    for group, times in session.loose_groups().items():
        for event in group[2]:
            counts.add_event(event, times)
    return counts


def torch_counts(root: Any) -> tuple[int, int]:
    """Forward and backward FLOPs of the kernels ``FlopCounterMode`` has formulas for, over
    everything a record saw (``root``: its session's root call; a parity check compares
    exactly these)."""
    session: RecordSession = root.session
    session.fold(final=True)
    counts = Counts()
    for work, calls in session.top.items():
        counts.add(counts_of(work), calls)
    counts.add(loose_counts(session))
    if session.backward_ran.ran:  # (what autograd's engine ran inside the record)
        return counts.torch_forward, session.backward_ran.flops()[2]
    return counts.torch_forward, counts.torch_backward
