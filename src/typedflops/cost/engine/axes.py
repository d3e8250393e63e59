"""The sizes dry runs change (axes), and what changing each alone shows.

An axis is a call's dim (``batch``, the ``d`` of the input) or a module's own size read
from its constructor (``n_embd`` of ``GPT(config)``, changed by building the module again,
see :mod:`.rebuild`). Changed alone, an axis is *regular* (the body runs the same ops),
*in the op sequence* (other ops: a loop or a branch on it) or *stuck* (no other value
runs: the module's weights fix the input's ``d``). Stuck axes of one value are changed
together: the ``d`` of the input with the ``n_embd`` the module is built from make one
axis, named after the call's dim, where that run runs. Equal sizes never share a name by
their value alone.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from .fit import Size
from .rebuild import OWN
from .runs import Probe, Run, Runner

__all__ = [
    "Axis",
    "Study",
    "axes_of",
    "candidates",
    "named_alike",
    "named_by_call",
    "study",
    "third",
    "tied",
]


@dataclass(frozen=True)
class Axis:
    """A size the dry runs change: ``name`` in formulas, ``keys`` the sizes of a run set to
    its value (a call's dim, a module's own size, or both where one follows the other),
    ``far`` whether it is the call's own (far checks change those)."""

    name: str
    keys: tuple[str, ...]
    far: bool

    def assign(self, value: Size) -> dict[str, Size]:
        """The sizes of a run that give this axis ``value``."""
        return dict.fromkeys(self.keys, value)


@dataclass
class Study:
    """What changing one axis alone showed: ``run`` at ``value`` with the base run's ops;
    ``other_ops`` when a run at another value ran other ops (a loop or branch on it)."""

    axis: Axis
    value: Size | None = None
    run: Run | None = None
    other_ops: bool = False

    @property
    def regular(self) -> bool:
        """It changes, and the ops stay the same."""
        return self.run is not None and not self.other_ops

    @property
    def stuck(self) -> bool:
        """No other value runs."""
        return self.run is None and not self.other_ops


def axes_of(probe: Probe, bound: Mapping[str, Size]) -> list[Axis]:
    """The call's dims that may change, then the module's own sizes read from its
    constructor (a size the module declares is one of the call's dims already)."""
    rebuild = probe.rebuild
    module_keys = {rebuild.key(n) for n in rebuild.sizes} if rebuild is not None else set()
    axes = [Axis(name, (name,), name not in module_keys) for name in probe.variable]
    if rebuild is None or rebuild.declared:
        return axes
    by_name = {axis.name: index for index, axis in enumerate(axes)}
    for name, size in rebuild.sizes.items():
        if name in probe.repeats:
            continue
        key = rebuild.key(name)
        if name in by_name:  # an argument named as a dim of the call: see named_alike
            if probe.dims[name] == size:
                axes.append(Axis(key, (key,), False))
        elif name in probe.dims:  # a dim the module holds, by its argument's name
            if probe.dims[name] == size:
                axes.append(Axis(name, (name, key), False))
        elif bound.get(name, size) == size:
            axes.append(Axis(name, (key,), False))
    return axes


def candidates(size: Size) -> list[Size]:
    """Values to change a size to: twice it, one more, half of it."""
    if isinstance(size, tuple):
        if not size:
            return []
        return [(value, *size[1:]) for value in _candidates_int(size[0])]
    return list(_candidates_int(size))


def _candidates_int(value: int) -> list[int]:
    if value == 0:
        return []  # a size-0 axis: fitted from size 2 up (see dryrun.measure)
    found = [2 * value, value + 1]
    # one below too (a size at its most: the positions of a table, a window)
    if value % 2 == 0 and value // 2 >= 2:
        found.append(value // 2)
    elif value - 1 >= 2:
        found.append(value - 1)
    return [v for v in dict.fromkeys(found) if v != value and v >= 1]


def study(runner: Runner, at: Mapping[str, Size], base: Run, axis: Axis) -> Study:
    """Change ``axis`` alone: the first value that runs the base run's ops, and whether a
    value before it ran other ops."""
    found = Study(axis)
    for candidate in candidates(at[axis.keys[0]])[:3]:
        run = runner.run({**at, **axis.assign(candidate)})
        if run is None:
            continue
        if run.ops == base.ops:
            found.value, found.run = candidate, run
            return found
        found.other_ops = True
    return found


def named_alike(
    runner: Runner, at: Mapping[str, Size], base: Run, studies: list[Study]
) -> list[Study]:
    """A module's size named as a dim of the call, at its size (its axis named by its key,
    ``self.seq_len``), is one size with that dim where the dim cannot change alone, studied
    together; else it is held, a number: the name is the dim's, and the dim follows the
    module's size no more than any other (the input's ``seq_len`` below the ``seq_len``
    of a rotary table that ``forward`` builds at its full length)."""
    calls = {s.axis.name: s for s in studies if s.axis.far}
    result: list[Study] = []
    for found in studies:
        axis = found.axis
        if not axis.name.startswith(OWN):
            result.append(found)
            continue
        call = calls.get(axis.name.removeprefix(OWN))
        if call is None or not call.stuck:
            continue
        joint = Axis(call.axis.name, (*call.axis.keys, *axis.keys), call.axis.far)
        result = [s for s in result if s is not call]
        result.append(study(runner, at, base, joint))
        calls[call.axis.name] = result[-1]
    return result


def tied(runner: Runner, at: Mapping[str, Size], base: Run, studies: list[Study]) -> list[Study]:
    """Stuck axes of one value, a module's own size among them, changed together: the
    fewest that run (a call's dim with one of the module's sizes), else more of them (a
    call whose contract makes two of the module's sizes equal), again with those left.
    The axis they make is named after the call's dim."""
    groups: dict[int, list[Study]] = {}
    for found in studies:
        value = at[found.axis.keys[0]]
        if found.stuck and isinstance(value, int) and value >= 2:
            groups.setdefault(value, []).append(found)
    result = list(studies)
    for members in groups.values():
        calls = [s.axis for s in members if s.axis.far]
        owns = [s.axis for s in members if not s.axis.far]
        # The fewest sizes first, and again with those left: a call's ``seq`` and ``d`` at
        # the ``seq_len`` and ``d_model`` of a position table are two ties, not one.
        while owns and len(calls) + len(owns) >= 2:
            joint = _tie(runner, at, base, calls, owns, studies)
            if joint is None:
                break
            result = [s for s in result if s.axis.keys[0] not in joint.axis.keys]
            result.append(joint)
            calls = [a for a in calls if a.keys[0] not in joint.axis.keys]
            owns = [a for a in owns if a.keys[0] not in joint.axis.keys]
        # The call's own dims of one value that run only changed together (``x @ x`` on
        # ``"b h w"``, an ``assert n == m``): one axis, named after the first.
        while len(calls) >= 2:
            joint = _tie_calls(runner, at, base, calls)
            if joint is None:
                break
            result = [s for s in result if s.axis.keys[0] not in joint.axis.keys]
            result.append(joint)
            calls = [a for a in calls if a.keys[0] not in joint.axis.keys]
    return result


def _tie_calls(
    runner: Runner, at: Mapping[str, Size], base: Run, calls: list[Axis]
) -> Study | None:
    """The first group of the call's stuck dims that runs changed together, pairs first."""
    groups = [*itertools.combinations(calls, 2), tuple(calls)]
    for together in dict.fromkeys(groups):
        keys = tuple(key for axis in together for key in axis.keys)
        joint = study(runner, at, base, Axis(together[0].name, keys, True))
        if not joint.stuck:
            return joint
    return None


def _tie(
    runner: Runner,
    at: Mapping[str, Size],
    base: Run,
    calls: list[Axis],
    owns: list[Axis],
    studies: list[Study],
) -> Study | None:
    """The first group of stuck axes that runs changed together, fewest first: a call's
    dim with one of the module's sizes, all the call's with one, one call's with all of
    the module's, then all of them."""
    groups = [
        *([call, own] for own in owns for call in calls),
        *([*calls, own] for own in owns if len(calls) > 1),
        *([call, *owns] for call in calls if len(owns) > 1),
        [*calls, *owns],
    ]
    for together in dict.fromkeys(tuple(group) for group in groups if len(group) >= 2):
        keys = tuple(key for axis in together for key in axis.keys)
        joint = study(runner, at, base, Axis(together[0].name, keys, together[0].far))
        if not joint.stuck and not _also_moved_by(runner, at, list(together), studies):
            return joint
    return None


def _also_moved_by(
    runner: Runner, at: Mapping[str, Size], together: list[Axis], studies: list[Study]
) -> bool:
    """Whether the call's dim of a tie also runs at other values with another of the
    module's stuck sizes changed instead: then equal values were a coincidence (the input's
    ``d`` is ``n_head * head_dim``, equal to ``n_head`` where ``head_dim`` is 1), and the
    dim follows no one size of the module."""
    calls = [axis for axis in together if axis.far]
    if not calls:
        return False
    call = calls[0]
    for other in studies:
        axis = other.axis
        if axis.far or not other.stuck or axis in together:
            continue
        size = at[axis.keys[0]]
        values = candidates(size) or ([1, 2] if size == 0 else [])
        for value in values[:2]:
            for moved in candidates(at[call.keys[0]])[:3]:
                if runner.run({**at, **axis.assign(value), **call.assign(moved)}) is not None:
                    return True
    return False


def named_by_call(studies: list[Study], at: Mapping[str, Size], base: Run) -> list[Study]:
    """A module's own size that a dim of the call follows (the return value's ``vocab``
    when the module is built at another ``vocab_size``) is named after that dim."""
    taken = {s.axis.name for s in studies} | {key for s in studies for key in s.axis.keys}
    renamed: list[Study] = []
    for found in studies:
        axis = found.axis
        if not axis.far and found.run is not None and found.value is not None:
            size = at[axis.keys[0]]
            follows = [
                name
                for name, value in base.bound.items()
                if name not in taken
                and value == size
                and found.run.bound.get(name) == found.value
                and not _moved_by_another(name, found, studies, base)
            ]
            if follows:
                taken.add(follows[0])
                axis = dataclasses.replace(axis, name=follows[0])
        renamed.append(dataclasses.replace(found, axis=axis))
    return renamed


def _moved_by_another(name: str, found: Study, studies: list[Study], base: Run) -> bool:
    """Whether a dim of the call also changed where another size changed alone (the
    return value's ``e`` is ``n_head * head_dim``): it follows no one size of the module."""
    return any(
        other is not found
        and other.run is not None
        and other.run.bound.get(name) != base.bound.get(name)
        for other in studies
    )


def third(size: Size, taken: Size, attempt: int) -> Size:
    """A value for a check run: neither ``size`` nor ``taken`` (the value a fit used)."""
    # A variadic dim is one symbol, the product of its sizes: both the change and the
    # check scale its first axis, so that each of its axes stays a function of the product.
    if isinstance(size, tuple):
        first = taken[0] if isinstance(taken, tuple) else taken
        return (_third_int(size[0], first, attempt), *size[1:])
    assert isinstance(taken, int)
    return _third_int(size, taken, attempt)


def _third_int(value: int, taken: int, attempt: int) -> int:
    # (one below, third: where the sizes above fail, a size at its most)
    below = [v for v in (value - 1, value - 2) if v >= 2]
    options = [3 * value, value + 2, *below, 5 * value, value + 3]
    options = [v for v in options if v not in (value, taken)]
    return options[attempt % len(options)]
