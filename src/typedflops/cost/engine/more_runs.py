"""The runs a fit takes where the simple forms fit some size of no op (:mod:`.families`):
each varied size changed alone to a third value, then every one changed at once again to
values no other run used. Made only where needed: a body whose sizes are all monomials or
affine in its dims runs no more than before."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from .axes import Axis
from .events import Event
from .fit import Plan, Size, size_value
from .runs import Run, Runner
from .sums import MOST_PAIRS

__all__ = ["fitted_further", "more_runs", "pair_runs"]


def fitted_further(
    runner: Runner,
    at: Mapping[str, Size],
    base: Run,
    varied: Sequence[Axis],
    points: Sequence[Mapping[str, Size]],
    plan: Plan,
    saved: list[list[Event]],
    refit: Callable[[Plan, list[list[Event]]], bool],
    others: list[tuple[Run, dict[str, int]]],
) -> None:
    """Fit ``plan`` again (by ``refit``, which says whether every formula was found) with
    :func:`more_runs`, and then, where two sizes did not factor apart, :func:`pair_runs`.
    The runs these make that ran other ops than ``base`` are added to ``others``, with
    their sizes, for the formulas to be checked against."""
    more = more_runs(runner, at, base, varied, points, others)
    if more is None:
        return
    extra, ran = more
    own = plan.assignments[0]
    plan = Plan(
        [*plan.assignments, *({**own, **point} for point in extra)],
        [*plan.runs, *(run.events for run in ran)],
        plan.varied,
        True,
        more=True,
    )
    saved = [*saved, *(run.saved for run in ran)]
    if refit(plan, saved) or not plan.mixed:
        return
    together = pair_runs(runner, at, base, varied, points, sorted(plan.mixed), others)
    if not together:
        return
    pairs = {pair: len(plan.runs) + i for i, (pair, _, _) in enumerate(together)}
    plan = dataclasses.replace(
        plan,
        assignments=[*plan.assignments, *({**own, **point} for _, point, _ in together)],
        runs=[*plan.runs, *(run.events for _, _, run in together)],
        pairs=pairs,
        mixed=set(),
        _series={},
        _rules={},
        _values={},
    )
    refit(plan, [*saved, *(run.saved for _, _, run in together)])


def more_runs(
    runner: Runner,
    at: Mapping[str, Size],
    base: Run,
    varied: Sequence[Axis],
    points: Sequence[Mapping[str, Size]],
    others: list[tuple[Run, dict[str, int]]],
) -> tuple[list[dict[str, Size]], list[Run]] | None:
    """The points (each varied axis's value, by name, where it differs from ``at``) and runs
    to add to a fit whose runs were at ``points`` (the base run's, each axis alone, the
    check), all running the base run's ops; None where one of them cannot be made."""
    found_points: list[dict[str, Size]] = []
    found_runs: list[Run] = []
    used: list[list[Size]] = []
    for index, axis in enumerate(varied):
        size = at[axis.keys[0]]
        taken = [size, points[1 + index][axis.name], points[-1][axis.name]]
        run = None
        for value in _options(size, taken[:2]):
            run = runner.run({**at, **axis.assign(value)})
            if run is not None and run.ops == base.ops:
                found_points.append({axis.name: value})
                found_runs.append(run)
                taken.append(value)
                break
            _other(run, {axis.name: value}, others)
            run = None
        if run is None:
            return None
        used.append(taken)
    options = [
        _options(at[axis.keys[0]], taken, last=True)
        for axis, taken in zip(varied, used, strict=True)
    ]
    for attempt in range(3):
        change: dict[str, Size] = {}
        sizes: dict[str, Size] = {}
        for axis, choices in zip(varied, options, strict=True):
            value = choices[attempt % len(choices)]
            change.update(axis.assign(value))
            sizes[axis.name] = value
        run = runner.run({**at, **change})
        if run is not None and run.ops == base.ops:
            return [*found_points, sizes], [*found_runs, run]
        _other(run, sizes, others)
    return None


def _other(
    run: Run | None, sizes: Mapping[str, Size], others: list[tuple[Run, dict[str, int]]]
) -> None:
    """Keep a run that ran (other ops than the base run's) in ``others``, with its sizes."""
    if run is not None:
        others.append((run, {name: size_value(size) for name, size in sizes.items()}))


def _options(size: Size, taken: Sequence[Size], *, last: bool = False) -> list[Size]:
    """Values for a size no other run took: scaled (a divisor stays one) or moved by a few,
    and for a run alone, below it too."""
    first = size[0] if isinstance(size, tuple) else size
    values = [5 * first, first + 3, 7 * first, first + 4] if last else [4 * first, first + 3]
    values += [3 * first, first + 2, 6 * first, first + 5]
    if not last:  # (a size that must divide another: below it, down to 1 last)
        values += [v for v in (first // 2, first // 4, first - 1) if v >= 2] + [1]
    firsts = {t[0] if isinstance(t, tuple) else t for t in taken}
    kept = [v for v in dict.fromkeys(values) if v not in firsts and v >= 1]
    if isinstance(size, tuple):
        return [(v, *size[1:]) for v in kept]
    return list(kept)


def pair_runs(
    runner: Runner,
    at: Mapping[str, Size],
    base: Run,
    varied: Sequence[Axis],
    points: Sequence[Mapping[str, Size]],
    pairs: Sequence[tuple[int, int]],
    others: list[tuple[Run, dict[str, int]]],
) -> list[tuple[tuple[int, int], dict[str, Size], Run]]:
    """For each pair of varied axes (by index; the first :data:`MOST_PAIRS`), the run with
    both at their values in their runs alone (``points[1 + i]``), where it runs the base
    run's ops."""
    found: list[tuple[tuple[int, int], dict[str, Size], Run]] = []
    for pair in sorted(pairs)[:MOST_PAIRS]:
        change: dict[str, Size] = {}
        sizes: dict[str, Size] = {}
        for index in pair:
            axis = varied[index]
            value = points[1 + index][axis.name]
            change.update(axis.assign(value))
            sizes[axis.name] = value
        run = runner.run({**at, **change})
        if run is not None and run.ops == base.ops:
            found.append((pair, sizes, run))
        else:
            _other(run, sizes, others)
    return found
