"""Formulas checked where a size the body derives from the fitted ones is 1.

The fits see every axis of every op as a formula in the sizes they changed: a head's width
``d/n_head``, half a width ``d/2``, a strided window's count ``seq/2``. Such a derived size
can be 1 at values of its symbols that no fit or check took (``d = n_head``), and there
torch may run other ops: the heads' merge ``(b, h, s, 1) -> (b, s, h)`` is a view where it
was a copy, so the projection after it takes a strided input and adds its bias apart
(``b*s*d`` FLOPs more). For each derived size at 2 or more at the call's sizes, each of its
symbols is solved for the size to be 1, the others kept (within their valid range: a
positive integer at which every derived size is a positive integer, and the body runs);
one run there checks the exact terms. A term it refutes gets its part there, fitted along
the sizes that keep the derived size 1 (each other symbol doubled, the solved one moved
with it, then all tripled as the check), ``... + b*s*n_head*KroneckerDelta(1, d/n_head)``,
or is marked inexact where no fit finds one. A matrix product over a summed dim of 1 run
as a multiply keeps its formula, as at 1 (:mod:`.at_one`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import sympy

from ..types import Term, is_one, tidy
from .at_one import multiplied
from .axes import Axis
from .fit import Plan, Size, axis_sizes, fit_count, fit_size
from .runs import TERMS, Counted, Probe, Run, Runner

__all__ = ["checked_where_derived_is_one", "derived_sizes"]

#: The most derived sizes checked where they are 1 (the fewest symbols first; sizes that
#: are 1 at no valid sizes, ``3*d``, cost nothing): each costs a run, and a few more where
#: a term needs its part there. A formula with more of them is marked inexact.
_MOST = 6


def derived_sizes(plan: Plan) -> list[sympy.Expr]:
    """The fitted sizes of the ops' axes that are neither a number nor one of the sizes
    changed (``d/n_head``, ``seq/2``), at 2 or more in the base run, fewest symbols first."""
    seen: set[tuple[int, ...]] = set()
    found: dict[sympy.Expr, None] = {}
    names = {sympy.Symbol(name) for name in plan.varied}
    for position in range(len(plan.runs[0])):
        columns = [axis_sizes(run[position]) for run in plan.runs]
        if len({len(column) for column in columns}) != 1:
            continue
        for values in zip(*columns, strict=True):
            if values in seen or values[0] < 2:
                continue
            seen.add(values)
            expr = fit_size(plan, values)
            if expr is None or expr in names or not expr.free_symbols:
                continue
            found[expr] = None
    return sorted(found, key=lambda e: (len(e.free_symbols), sympy.count_ops(e), str(e)))


def checked_where_derived_is_one(
    probe: Probe,
    runner: Runner,
    base: Run,
    at: Mapping[str, Size],
    plan: Plan,
    axes: Sequence[Axis],
    terms: Mapping[str, Term],
    values: Mapping[str, int],
) -> dict[str, Term]:
    """``terms``, each exact one checked by a run where each derived size of ``plan`` is 1
    (one of its symbols solved for it): given its part there, or marked inexact."""
    result = dict(terms)
    by_name = {axis.name: axis for axis in axes if isinstance(at[axis.keys[0]], int)}
    derived = derived_sizes(plan)
    checked = 0
    for size in derived:
        if not any(term.exact for term in result.values()):
            break
        for symbol in sorted(size.free_symbols, key=str):
            point = _solved(size, symbol, values, derived, by_name)
            if point is None:
                continue
            if checked == _MOST:  # (one more that could be 1, not checked: not sure)
                return {name: dataclasses.replace(t, exact=False) for name, t in result.items()}
            checked += 1
            run = runner.run({**at, **_assigned(point, by_name)})
            if run is None:
                continue
            wrong = _refuted(probe, run, result, {**values, **point})
            if wrong and not multiplied(base, run):
                parts = _parts(runner, at, size, symbol, point, by_name, result, values, wrong)
                for name in wrong:
                    part = parts.get(name)
                    result[name] = (
                        Term(result[name].count, tidy(result[name].formula + part * is_one(size)))
                        if part is not None
                        else dataclasses.replace(result[name], exact=False)
                    )
            break  # (one run where the size is 1 checks it)
    return result


def _solved(
    size: sympy.Expr,
    symbol: sympy.Symbol,
    values: Mapping[str, int],
    derived: Sequence[sympy.Expr],
    axes: Mapping[str, Axis],
) -> dict[str, int] | None:
    """The values of the sizes where ``size`` is 1 with ``symbol`` solved for and the other
    sizes at ``values``; None where no positive integer gives it, or where another derived
    size is then not a positive integer (the body would be asked for a shape its formulas
    do not describe: a width ``n_head`` does not divide)."""
    name = str(symbol)
    if name not in axes or name not in values:
        return None
    others = {s: values[str(s)] for s in size.free_symbols if s != symbol and str(s) in values}
    if len(others) != len(size.free_symbols) - 1:
        return None
    try:
        roots = sympy.solve(sympy.Eq(size.xreplace(others), 1), symbol)
    except (NotImplementedError, TypeError, ValueError):
        return None
    for root in roots:
        if not (root.is_integer and root.is_positive) or int(root) == values[name]:
            continue
        point = {**values, name: int(root)}
        shown = {sympy.Symbol(key): value for key, value in point.items()}
        if all(_positive_integer(other.xreplace(shown)) for other in derived):
            return {name: int(root)}
    return None


def _positive_integer(value: sympy.Expr) -> bool:
    return bool(value.is_integer and value.is_positive) or bool(value.free_symbols)


def _assigned(point: Mapping[str, int], axes: Mapping[str, Axis]) -> dict[str, Size]:
    change: dict[str, Size] = {}
    for name, value in point.items():
        change.update(axes[name].assign(value))
    return change


def _refuted(
    probe: Probe, run: Run | Counted, terms: Mapping[str, Term], values: Mapping[str, int]
) -> list[str]:
    counts = run.counts()
    return [
        name
        for name in TERMS
        if terms[name].exact
        and not (name == "forward" and probe.declared is not None)
        and terms[name].at(values) != counts[name]
    ]


def _parts(
    runner: Runner,
    at: Mapping[str, Size],
    size: sympy.Expr,
    symbol: sympy.Symbol,
    point: Mapping[str, int],
    axes: Mapping[str, Axis],
    terms: Mapping[str, Term],
    values: Mapping[str, int],
    wrong: Sequence[str],
) -> dict[str, sympy.Expr]:
    """For each of the ``wrong`` terms, what the runs with ``size`` held at 1 count over
    its formula, fitted in the other sizes (the solved ``symbol`` moved with them): from
    the run at ``point``, one with each other size doubled and a check with all tripled.
    Empty where a run does not build or no fit is verified."""
    name = str(symbol)
    used = {str(s) for n in wrong for s in terms[n].formula.free_symbols}
    used |= {str(s) for s in size.free_symbols}
    others = sorted(n for n in used if n != name)
    if any(n not in axes or n not in values for n in others):
        return {}  # (a size no run can change here: its part would be a guess)
    start = {**{n: values[n] for n in others}, name: point[name]}
    assignments: list[dict[str, int]] = [start]
    for other in others:
        assignments.append({**start, other: 2 * values[other]})
    assignments.append({**start, **{other: 3 * values[other] for other in others}})
    differences: dict[str, list[int]] = {n: [] for n in wrong}
    for assignment in assignments:
        there = _counted_at_one(runner, at, size, symbol, assignment, axes, values)
        if there is None:
            return {}
        shown, counts = there
        for n in wrong:
            formula = terms[n].at(shown)
            if not formula.is_integer:
                return {}
            differences[n].append(counts[n] - int(formula))
    kept: list[dict[str, Size]] = [{k: v for k, v in a.items() if k != name} for a in assignments]
    plan = Plan(kept, [[] for _ in assignments], others, True)
    found: dict[str, sympy.Expr] = {}
    for n in wrong:
        expr, exact = fit_count(plan, differences[n])
        if exact:
            found[n] = expr
    return _kept_at_ones(runner, at, size, symbol, start, axes, terms, values, found)


def _kept_at_ones(
    runner: Runner,
    at: Mapping[str, Size],
    size: sympy.Expr,
    symbol: sympy.Symbol,
    start: Mapping[str, int],
    axes: Mapping[str, Axis],
    terms: Mapping[str, Term],
    values: Mapping[str, int],
    found: dict[str, sympy.Expr],
) -> dict[str, sympy.Expr]:
    """The parts of ``found`` that runs confirm where the sizes they name besides the
    derived one's are 1 too. At ``seq = 1`` a merge of heads of width 1 is contiguous
    again and the bias goes back into the product: such a part is kept as
    ``part * (1 - KroneckerDelta(1, seq))`` where runs with ``seq`` alone at 1, with all at
    1, and with all but ``seq`` at 1 confirm it; a part no run confirms is dropped."""
    own = {str(s) for s in size.free_symbols}
    ones = {n: 1 for n in start if n not in own and start[n] != 1}
    if not found or not ones:
        return found

    def counted(changed: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]] | None:
        return _counted_at_one(runner, at, size, symbol, {**start, **changed}, axes, values)

    def holds(point: tuple[dict[str, int], dict[str, int]], n: str, part: sympy.Expr) -> bool:
        shown, counts = point
        symbols = {sympy.Symbol(k): v for k, v in shown.items()}
        return bool(terms[n].at(shown) + part.xreplace(symbols) == counts[n])

    corner = counted(ones)
    if corner is None:
        return found  # (no such run: those sizes are not the body's)
    kept: dict[str, sympy.Expr] = {}
    for n, part in found.items():
        if holds(corner, n, part):
            kept[n] = part
            continue
        for name in sorted(ones):
            gated = part * (1 - is_one(sympy.Symbol(name)))
            alone = counted({name: 1})
            rest = counted({k: v for k, v in ones.items() if k != name})
            if (
                alone is not None
                and rest is not None
                and holds(corner, n, gated)
                and holds(alone, n, gated)
                and holds(rest, n, gated)
            ):
                kept[n] = gated
                break
    return kept


def _counted_at_one(
    runner: Runner,
    at: Mapping[str, Size],
    size: sympy.Expr,
    symbol: sympy.Symbol,
    assignment: Mapping[str, int],
    axes: Mapping[str, Axis],
    values: Mapping[str, int],
) -> tuple[dict[str, int], dict[str, int]] | None:
    """A run at ``assignment`` with ``symbol`` solved so that ``size`` is 1: every size's
    value there and the run's counts, or None where no such run builds."""
    held = _held_at_one(size, symbol, assignment)
    run = runner.counted({**at, **_assigned(held, axes)}) if held is not None else None
    if held is None or run is None:
        return None
    return {**values, **held}, run.counts()


def _held_at_one(
    size: sympy.Expr, symbol: sympy.Symbol, assignment: Mapping[str, int]
) -> dict[str, int] | None:
    """``assignment`` with ``symbol`` solved again so that ``size`` is 1 there."""
    others = {sympy.Symbol(n): v for n, v in assignment.items() if n != str(symbol)}
    try:
        roots = sympy.solve(sympy.Eq(size.xreplace(others), 1), symbol)
    except (NotImplementedError, TypeError, ValueError):
        return None
    for root in roots:
        if root.is_integer and root.is_positive:
            return {**assignment, str(symbol): int(root)}
    return None
