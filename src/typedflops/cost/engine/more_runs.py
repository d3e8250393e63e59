"""The runs a fit takes where the simple forms fit some size of no op (:mod:`.families`):
each varied size changed alone to a third value, then every one changed at once again to
values no other run used. Made only where needed: a body whose sizes are all monomials or
affine in its dims runs no more than before."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .axes import Axis
from .fit import Size
from .runs import Run, Runner

__all__ = ["more_runs"]


def more_runs(
    runner: Runner,
    at: Mapping[str, Size],
    base: Run,
    varied: Sequence[Axis],
    points: Sequence[Mapping[str, Size]],
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
    return None


def _options(size: Size, taken: Sequence[Size], *, last: bool = False) -> list[Size]:
    """Values for a size no other run took: scaled (a divisor stays one) or moved by a few."""
    first = size[0] if isinstance(size, tuple) else size
    values = [5 * first, first + 3, 7 * first, first + 4] if last else [4 * first, first + 3]
    values += [3 * first, first + 2, 6 * first, first + 5]
    firsts = {t[0] if isinstance(t, tuple) else t for t in taken}
    kept = [v for v in dict.fromkeys(values) if v not in firsts and v >= 1]
    if isinstance(size, tuple):
        return [(v, *size[1:]) for v in kept]
    return list(kept)
