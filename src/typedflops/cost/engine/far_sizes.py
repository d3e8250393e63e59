"""Checks of a formula far from the call's sizes: every dim far above its value at once,
then every dim at 2 at once. A branch on a size at a threshold the fits did not reach
(``if x.shape[0] > 100`` fitted at 8) shows there, and so does a size floored or rounded
up where the fits' values were all multiples (a pooling's ``ceil(seq/2)`` is ``seq/2`` at
every even ``seq``): the far value above is odd.

Where the body cannot run with every dim moved at once (a width that ``n_head`` must
divide, taken to an odd value, or to 2 below it), each dim is moved alone instead, to its
far value or the first of a few above it that runs, so that the other dims' checks are not
lost with it. Where none of those runs (a size bounded by a table the body indexes: the
``seq`` of a model with 1,024 learned positions, taken to 32,769), the checks are made at
values below the far one that run, found by halving the distance from the call's size up
to near the bound (a few runs; those past the bound stop at the lookup), so that a branch
inside the bound (``if seq > 256`` under 1,024 positions) is seen. Where all far above
ran, each dim is also taken far above alone: a branch on how two dims compare past a
factor (``if x.shape[0] > 8 * x.shape[1]``) keeps its side with both far, not with one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..types import Term
from .axes import Axis
from .fit import Size, size_value
from .orders import Mark
from .runs import Runner

__all__ = ["far_checked", "far_value"]

# Each dim at 2, and at this many times its size plus one (odd, so that a branch on parity
# or a floor shows) or at least at FAR_FLOOR. A branch on a size at a threshold between
# those is seen.
FAR = 64
FAR_FLOOR = 1025

#: What is added to a far value above for a dim moved alone, in turn, until the body runs.
_NEAR_FAR = (0, 1, 2, 3, 4, 5, 6, 7)

#: The most halvings of the distance from a size to its far value above, where the body
#: runs at neither the far value nor those after it (a bound below it).
_HALVINGS = 8


def far_value(size: Size, up: bool, loop: bool = False, *, loop_far: int = 16) -> Size:
    """The far value of a size (of a variadic dim's first axis): 2 below; above, 64 times
    the size and one, at least 1,025, or for a size a loop runs over ``loop_far`` times it
    and one (its ops grow with it)."""
    if isinstance(size, tuple):
        return (_far_int(size[0], up, loop, loop_far), *size[1:]) if size else size
    return _far_int(size, up, loop, loop_far)


def _far_int(size: int, up: bool, loop: bool, loop_far: int) -> int:
    if not up:
        return 2
    return loop_far * size + 1 if loop else max(FAR * size + 1, FAR_FLOOR)


def far_checked(
    runner: Runner,
    at: Mapping[str, Size],
    axes: Sequence[Axis],
    terms: dict[str, Term],
    values: Mapping[str, int],
    mark: Mark,
) -> dict[str, Term]:
    """``terms``, those that runs with the call's dims (``axes`` that are ``far``) far above
    and far below their values refute marked inexact (in place): all at once, else each
    alone (above: below a bound the body has, where it refuses the far values)."""
    moved = [axis for axis in axes if axis.far]
    for up in (True, False):
        change: dict[str, Size] = {}
        sizes: dict[str, int] = {}
        for axis in moved:
            size = at[axis.keys[0]]
            value = far_value(size, up)
            if value != size:
                change.update(axis.assign(value))
                sizes[axis.name] = size_value(value)
        if not change:
            continue
        run = runner.counted({**at, **change})
        mark(run, terms, {**values, **sizes})
        if run is None:
            for axis in moved:
                _alone(runner, at, axis, up, terms, values, mark)
        elif up and len(moved) > 1:
            # (a branch on how two dims compare past a factor, ``if n > 8 * d``, holds
            # the same way with both far: each is taken far alone too)
            for axis in moved:
                if any(term.exact for term in terms.values()):
                    _alone_above(runner, at, axis, terms, values, mark)
    return terms


def _alone_above(
    runner: Runner,
    at: Mapping[str, Size],
    axis: Axis,
    terms: dict[str, Term],
    values: Mapping[str, int],
    mark: Mark,
) -> None:
    """The check of ``axis`` moved alone to its far value above, or the first of a few
    more that the body runs at (none: nothing is checked, as the dims all far ran)."""
    size = at[axis.keys[0]]
    target = far_value(size, True)
    start = target[0] if isinstance(target, tuple) else target
    for option in (start + added for added in _NEAR_FAR):
        value: Size = (option, *size[1:]) if isinstance(size, tuple) else option
        run = runner.counted({**at, **axis.assign(value)})
        if run is not None:
            mark(run, terms, {**values, axis.name: size_value(value)})
            return


def _alone(
    runner: Runner,
    at: Mapping[str, Size],
    axis: Axis,
    up: bool,
    terms: dict[str, Term],
    values: Mapping[str, int],
    mark: Mark,
) -> None:
    """The check of ``axis`` moved alone to its far value (above: or the first of a few
    more that the body runs at; below: 2, else 3)."""
    size = at[axis.keys[0]]
    first = size[0] if isinstance(size, tuple) else size
    target = far_value(size, up)
    start = target[0] if isinstance(target, tuple) else target
    options = [start + added for added in _NEAR_FAR] if up else [2, 3]
    for option in options:
        if option == first or (not up and option >= first):
            continue
        value: Size = (option, *size[1:]) if isinstance(size, tuple) else option
        run = runner.counted({**at, **axis.assign(value)})
        if run is not None:
            mark(run, terms, {**values, axis.name: size_value(value)})
            return
    if up:
        _below_bound(runner, at, axis, start, terms, values, mark)


def _below_bound(
    runner: Runner,
    at: Mapping[str, Size],
    axis: Axis,
    refused: int,
    terms: dict[str, Term],
    values: Mapping[str, int],
    mark: Mark,
) -> None:
    """Checks of ``axis`` between its size and ``refused`` (a far value the body refuses):
    the distance halved from the size, at most :data:`_HALVINGS` runs, each that runs a
    check, until one runs within an eighth of the first value above it that does not."""
    size = at[axis.keys[0]]
    low = size[0] if isinstance(size, tuple) else size
    high = refused
    for _ in range(_HALVINGS):
        middle = (low + high) // 2
        if middle <= low:
            return
        value: Size = (middle, *size[1:]) if isinstance(size, tuple) else middle
        run = runner.counted({**at, **axis.assign(value)})
        if run is None:
            high = middle
            continue
        mark(run, terms, {**values, axis.name: size_value(value)})
        low = middle
        if high - low <= low // 8:
            return
