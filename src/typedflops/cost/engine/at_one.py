"""Formulas at size 1, where what runs differs from sizes of 2 and up.

The fits change each size from its value, never to 1, and size 1 is where code changes
course: bodies branch on it (``if x.shape[1] == 1: return x``), torch picks other kernels
for it (attention at one query), and a reshape of a size-1 dim is a view where it was a
copy (so autograd saves other storages: batch 1). So each call dim is checked by a dry
run at 1, one that no formula names too (``if ctx.shape[0] == 1: y = y + ctx``). Where a
term differs there, what differs is fitted in the other dims with that dim held at 1, and
added where it is 1: ``5*d*n - 5*n*KroneckerDelta(1, d)``.
Pairs of dims at 1 are checked and fitted the same way (``KroneckerDelta(1, i)*
KroneckerDelta(1, j)``); three or more dims at 1 at once are not checked. A term whose part
at 1 no fit finds is inexact. A module's own size is checked alone the same way, the module
built at 1. One difference keeps the formula: a matrix product over a
summed dim of 1, which torch runs as a multiply (``einsum`` at ``d_in = 1``); its formula
stays the product's as written, ``2*batch*d_in*d_out``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence

import sympy

from ..types import Cost, Term, above_one, is_one, tidy
from .axes import Axis
from .events import Event
from .fit import Size
from .runs import Probe, Run, Runner

__all__ = ["checked_at_one", "multiplied", "with_part_at_one"]

Measure = Callable[[Probe], Cost]

# Every pair of dims is set to 1 together up to this many dims (beyond, pairs of dims with
# a part at 1 alone, up to this many of them).
_PAIRS = 4


def with_part_at_one(formula: sympy.Expr, name: str, at_one: sympy.Expr) -> sympy.Expr:
    """``formula``, with ``at_one`` (a formula in the other dims) in its place where the dim
    ``name`` is 1.

    >>> b, i, o = sympy.symbols("b i o")
    >>> with_part_at_one(2 * b * i * o, "i", b * o)
    2*b*i*o - b*o*KroneckerDelta(1, i)
    """
    symbol = sympy.Symbol(name)
    difference = sympy.expand(at_one - formula.xreplace({symbol: 1}))
    return tidy(formula + difference * is_one(symbol))


def checked_at_one(
    probe: Probe,
    runner: Runner,
    base: Run,
    at: Mapping[str, Size],
    axes: Sequence[Axis],
    cost: Cost,
    measure: Measure,
) -> Cost:
    """``cost`` with its exact terms checked by runs with the call's dims (``axes``, at 2 or
    more in ``at``) at 1: each alone, then in pairs (``if n == 1 and d == 1``), and one
    that does not run at 1 alone with each of the module's own sizes at 1. A term such
    a run refutes gains its part there, fitted by ``measure`` with those dims held at 1,
    or is inexact where no fit finds one (a product run as a multiply excepted)."""
    terms = dict(cost.terms)
    checked = [
        axis
        for axis in axes
        if axis.far
        and _at_least_two(at[axis.keys[0]])
        and any(term.exact for term in terms.values())
    ]
    parted: list[Axis] = []
    for axis in checked:
        if _with_parts(probe, runner, base, at, (axis,), cost.dims, terms, measure):
            parted.append(axis)
    pairs = checked if len(checked) <= _PAIRS else parted[:_PAIRS]
    for group in itertools.combinations(pairs, 2):
        _with_parts(probe, runner, base, at, group, cost.dims, terms, measure)
    own = [axis for axis in axes if not axis.far and _at_least_two(at[axis.keys[0]])]
    for axis in checked:
        # A dim the body runs at 1 only with a module's size at 1 too (a width of 1 that
        # ``n_head`` must divide): checked with each such size at 1 with it.
        exact = any(term.exact for term in terms.values())
        if exact and own and runner.run({**at, **{key: 1 for key in axis.keys}}) is None:
            for other in own:
                _with_parts(probe, runner, base, at, (axis, other), cost.dims, terms, measure)
    for axis in axes:
        # A module's own size (``n_kv_heads``, built at 1: multi-query attention's own
        # path), alone: its part fitted with the module built at 1, or the term inexact.
        # A size no formula names (``if self.n_head > self.threshold``) is compared, not
        # counted: what differs at 1 is a branch taken there, not a part of its own.
        if not axis.far and _at_least_two(at[axis.keys[0]]):
            named = any(_names(term, axis) for term in terms.values())
            _with_parts(probe, runner, base, at, (axis,), cost.dims, terms, measure, named)
    return cost if terms == cost.terms else cost.with_terms(terms)


def _with_parts(
    probe: Probe,
    runner: Runner,
    base: Run,
    at: Mapping[str, Size],
    group: Sequence[Axis],
    dims: Mapping[str, int],
    terms: dict[str, Term],
    measure: Measure,
    parts: bool = True,
) -> bool:
    """Check ``terms`` with the ``group``'s dims at 1, giving each refuted one its part
    there (in place; inexact instead where not ``parts``); whether any was refuted. Where
    the only difference is a matrix product torch ran as a multiply (a sum over one
    element), the formula stays the one of the product as written, as for sizes of 2 and
    up."""
    wrong, counts, run = _refuted(probe, runner, at, group, dims, terms)
    if not wrong or run is None or multiplied(base, run):
        return False
    if not parts:
        for name in wrong:
            terms[name] = dataclasses.replace(terms[name], exact=False)
        return True
    pinned = _pinned(probe, group, measure)
    values = {**dims, **{axis.name: 1 for axis in group}}
    ones = {sympy.Symbol(axis.name): sympy.Integer(1) for axis in group}
    where = sympy.Mul(*(is_one(symbol) for symbol in ones))
    for name in wrong:
        term, part = terms[name], None if pinned is None else pinned.terms[name]
        if part is None or not part.exact or part.at(values) != counts[name]:
            terms[name] = dataclasses.replace(term, exact=False)
            continue
        # A dim alone: its part is what differs from the formula for sizes of 2 and up, so
        # that parts of dims that change other ops add up where both are 1; a pair: what
        # differs from the formula with the parts of each dim.
        reference = above_one(term.formula) if len(group) == 1 else term.formula
        difference = sympy.expand(part.formula - reference.xreplace(ones))
        terms[name] = Term(term.count, tidy(term.formula + difference * where))
    return True


def _names(term: Term, axis: Axis) -> bool:
    """Whether ``term``'s formula names ``axis``."""
    return sympy.Symbol(axis.name) in term.formula.free_symbols


def multiplied(base: Run, run: Run) -> bool:
    """Whether ``run`` (dims at 1) differs from ``base`` only where torch ran a matrix
    product over a summed dim of 1 as a multiply (``einsum``'s ``bmm`` becomes a ``mul``):
    op for op (views aside), each op that differs is a matrix product become a multiply. A
    product the body leaves out at 1 (``if n > 1: y = y @ w``) is no such change."""
    before, after = _ops(base), _ops(run)
    if len(before) != len(after):
        return False
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b.op != a.op]
    return bool(changed) and all(b.matmul_flops and a.op in _MULTIPLY for b, a in changed)


_MULTIPLY = frozenset({"mul"})


def _ops(run: Run) -> list[Event]:
    """The ops of a run other than views, in order."""
    return [event for event in run.events if not event.view]


def _at_least_two(size: Size) -> bool:
    """A size the fits moved from (a variadic dim's sizes are not set to 1)."""
    return isinstance(size, int) and size >= 2


def _refuted(
    probe: Probe,
    runner: Runner,
    at: Mapping[str, Size],
    group: Sequence[Axis],
    dims: Mapping[str, int],
    terms: Mapping[str, Term],
) -> tuple[list[str], dict[str, int], Run | None]:
    """The exact terms that a run with the ``group``'s dims at 1 refutes (a term that
    names none of them too), that run's counts and the run (none where the body refuses
    those sizes)."""
    checked = [
        name
        for name, term in terms.items()
        if term.exact and not (name == "forward" and probe.declared is not None)
    ]
    run = runner.run({**at, **{key: 1 for axis in group for key in axis.keys}}) if checked else None
    if run is None:
        return [], {}, None
    counts = run.counts()
    values = {**dims, **{axis.name: 1 for axis in group}}
    return [name for name in checked if terms[name].at(values) != counts[name]], counts, run


def _pinned(probe: Probe, group: Sequence[Axis], measure: Measure) -> Cost | None:
    """The cost with the ``group``'s dims held at 1 (a module's own size tied to a dim
    with it) and the other sizes changed as usual; None where the body does not run there."""
    keys = {key: 1 for axis in group for key in axis.keys}
    dims = {**probe.dims, **{name: 1 for name in keys if name in probe.dims}}
    variable = [name for name in probe.variable if name not in keys]
    pinned = {**probe.pinned, **keys}
    try:
        return measure(dataclasses.replace(probe, dims=dims, variable=variable, pinned=pinned))
    except Exception:  # a body that runs at 1 but not at the fit's sizes from there
        return None
