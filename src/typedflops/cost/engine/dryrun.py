"""The Cost of a call from dry runs at several sizes: formulas in the call's dims, each
symbol of which was changed and checked.

:func:`measure` runs the call (a :class:`~.runs.Probe`) at its own sizes, then changes each
of its sizes in turn: the call's dims, and the module's own sizes, by building the module
again at other values (:mod:`.rebuild`). Each size is then one of:

- *regular*: the body runs the same ops at another value; its ops' sizes are fitted op by
  op (:mod:`.fit`) and checked by a run with every such size changed at once;
- *in the op sequence*: the body runs other ops at other values (a loop or a branch on
  the size); its counts are interpolated over several values (:mod:`.sequence`), or the
  Cost is marked inexact;
- *stuck*: no other value runs (a dim the module's weights fix). Sizes stuck at one value
  are changed together (the ``d`` of the input with the ``n_embd`` the module is built
  from): where they run, they are one symbol, named after the call's dim. A size that
  nothing changes is a number in the formulas and is listed in ``Cost.fixed``.

Two sizes that happen to be equal are told apart because each is changed alone. Every
formula is then checked again at sizes no fit used: the count of each block of a
``ModuleList`` at one more block, and the call's dims far above and below their values
(a branch on ``x.shape[0] > 100``), and with the sizes made equal and turned in order (a
branch on ``self.d_in == self.d_out``: :mod:`.orders`). A formula a check refutes is marked
inexact.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sympy

from ..types import Cost, Term
from .at_one import checked_at_one, with_part_at_one
from .axes import Axis, axes_of, named_alike, named_by_call, study, third, tied
from .backward import backward_of
from .derived_ones import checked_where_derived_is_one
from .events import Event
from .far_sizes import far_checked, far_value
from .fit import Fitted, Plan, Size, fit, size_value
from .held_sizes import Held, own_held, with_held
from .more_runs import fitted_further
from .orders import order_checked
from .own_far import OWN_FAR, own_far_checked
from .rebuild import OWN
from .rules import declared_flops
from .runs import TERMS, Counted, Probe, Run, Runner, Thunk, run_once
from .sequence import MAX_DEGREE, interpolated, points_from
from .skipped_work import assumed
from .terms import fitted_terms, held_rows, op_costs, uncounted

__all__ = ["Probe", "Run", "Thunk", "measure", "run_once"]


@dataclass
class _Fitting:
    """An op-by-op fit at one set of sizes: its plan, the formula of each op, the bytes
    saved in each run, the axes it changed and their values there."""

    plan: Plan
    fitted: Fitted
    saved: list[list[Event]]
    varied: list[Axis]
    values: dict[str, int]
    # check runs that ran other ops than the base run, with their sizes: not fitted, but a
    # formula they refute is not exact (``if n % 3 == 0:`` taken at the check's n = 24)
    others: list[tuple[Run, dict[str, int]]] = field(default_factory=list)

    def exact(self) -> bool:
        """Whether every op's formulas and the bytes saved in every run were fitted."""
        return self.fitted.exact and all(t.exact for t in self.terms().values())

    def terms(self, repeat: Mapping[int, sympy.Symbol] | None = None) -> dict[str, Term]:
        """The terms of the fit's base run (``repeat``: names for counts of blocks)."""
        repeat = repeat or {}
        values = {**self.values, **{str(symbol): count for count, symbol in repeat.items()}}
        return fitted_terms(self.plan, self.fitted, self.saved, repeat, values)


def measure(probe: Probe, *, shifted: bool = False) -> Cost:
    """The cost of the probe's call at its base sizes, with formulas fitted in its dims.

    A dim of size 1 that could not be changed (torch takes another path at size 1: a view
    where a copy was, a sum over one element lowered away) is fitted from runs at size 2
    and up instead; a formula from there replaces the base run's where it gives the base
    run's count at size 1, and where it does not, the base run's formula is its part at 1
    (:mod:`.at_one`), so that every formula still evaluates to its count. Each call dim
    above 1 is then run at 1 and given such a part where the ops there differ.
    """
    runner = Runner(probe)
    start: dict[str, Size] = dict(probe.dims)
    rebuild = probe.rebuild
    if rebuild is not None and not rebuild.declared:
        start.update({rebuild.key(name): size for name, size in rebuild.sizes.items()})
    start.update(probe.pinned)
    base = runner.base(start)
    bound = {**base.bound, **probe.dims}
    axes = [a for a in axes_of(probe, bound) if not probe.pinned.keys() & set(a.keys)]
    studies = [study(runner, start, base, axis) for axis in axes]
    studies = named_alike(runner, start, base, studies)
    studies = named_by_call(tied(runner, start, base, studies), start, base)
    at_one = [
        s.axis
        for s in studies
        if not s.regular and s.axis.keys[0] in probe.variable and _is_one(start[s.axis.keys[0]])
    ]
    regular = [s.axis for s in studies if s.regular]
    sequence = [s.axis for s in studies if s.other_ops and s.axis not in at_one]
    fitting = _fit_at(runner, start, regular, base)
    assert fitting is not None  # the base run ran
    values = _values(start, [*fitting.varied, *sequence])
    repeat = _repeat_symbols(probe, values)
    repeat = _verified_repeats(runner, start, probe, fitting, repeat, values)
    unverified = _unverified_repeats(probe, repeat, values)
    if unverified:
        # a count of blocks that ``n_layers * F`` does not give (work outside the blocks
        # repeats with them: a residual add per block) is a size like the others, fitted by
        # rebuilding the module at other counts
        kept = {name: count for name, count in probe.repeats.items() if name not in unverified}
        return measure(dataclasses.replace(probe, repeats=kept), shifted=shifted)
    values.update({str(symbol): count for count, symbol in repeat.items()})
    terms = fitting.terms(repeat)
    if sequence:
        axes = [*fitting.varied, *sequence]
        over = _over_sequence(runner, start, fitting.varied, sequence)
        if over is not None and not _refuted_anywhere(runner, start, axes, over, values, probe):
            terms = {name: term.checked_at(values) for name, term in over.items()}
        else:
            terms = {name: dataclasses.replace(t, exact=False) for name, t in terms.items()}
    for other, at_other in fitting.others:
        _mark_refuted(other, terms, {**values, **at_other}, probe)
    # (a size derived from the fitted ones, ``d/n_head``, checked where it is 1, so that the
    # checks below that make it 1 find its part there)
    sizes = [*fitting.varied, *sequence]
    terms = checked_where_derived_is_one(
        probe, runner, base, start, fitting.plan, sizes, terms, values
    )
    # (a module's own size whose op sequence changed is taken far off too, as one fitted)
    own_sequence = [a for a in sequence if not a.far]
    terms = _far_checked(runner, start, [*fitting.varied, *own_sequence], terms, values, probe)
    terms = _far_checked_loops(runner, start, [a for a in sequence if a.far], terms, values, probe)
    if not shifted:  # (a part at 1 is fitted at the sizes it is checked at)
        mark = functools.partial(_mark_refuted, probe=probe)
        terms = order_checked(runner, start, [*fitting.varied, *sequence], terms, values, mark)
    calls = [s.axis for s in studies if s.axis.far and not s.stuck]
    terms = _split_checked(runner, start, calls, terms, values, probe)
    if probe.declared is not None:
        shown = {**{k: size_value(v) for k, v in bound.items()}, **values}
        flops = declared_flops(probe.function, probe.declared, shown)
        terms["forward"] = Term(flops, probe.declared)
    changed = {name for s in studies if not s.stuck for name in _names(s.axis)}
    # a dim that moved with a size changed alone (the return value's ``n_head * head_dim``)
    # is no number in the formulas: held fixed it is not
    changed |= {
        name
        for s in studies
        if s.run is not None
        for name, size in s.run.bound.items()
        if base.bound.get(name) != size
    }
    changed |= {str(symbol) for symbol in repeat.values()}
    moved = {key for s in studies if not s.stuck for key in s.axis.keys}
    moved |= {OWN + str(symbol) for symbol in repeat.values()}
    held = (*own_held(probe.rebuild, moved), *probe.held)
    cost = _cost(probe, base, fitting, terms, bound, values, changed, held)
    if sequence or at_one:  # (the rows' fit held these sizes at their values)
        cost = dataclasses.replace(cost, ops=held_rows(cost.ops))
    moving = any(
        s.other_ops or _moves_from_zero(runner, start, base, s.axis)
        for s in studies
        if s.axis in at_one
    )
    if at_one and not shifted:
        cost = _fitted_above_one(probe, cost, at_one, moving)
    elif moving:
        cost = _inexact(cost)
    if not shifted:
        # (a dim no other value runs is a number of the formulas, listed as held: no part
        # at 1 names it, though torch may broadcast it there)
        checked = [s.axis for s in studies if s.axis not in at_one and not s.stuck]
        cost = checked_at_one(
            probe, runner, base, start, checked, cost, lambda p: measure(p, shifted=True)
        )
    if runner.branched:  # (counted on the path the body takes on fake tensors)
        cost = _inexact(cost)
    if not runner.hooks:  # (no saved-tensor hooks ran: no activation memory measured)
        cost = dataclasses.replace(
            cost,
            activation=Term.of_count(cost.activation.count, exact=False),
            uncounted=(*cost.uncounted, _NO_ACTIVATION),
        )
    return _held_at_own_sizes(cost)


#: What a Cost lists uncounted where its runs went without saved-tensor hooks.
_NO_ACTIVATION = (
    "activation memory (torch.func's transforms refuse the saved-tensor hooks that measure it)"
)


def _held_at_own_sizes(cost: Cost) -> Cost:
    """``cost`` with each term that does not give its count at the cost's own dims, or
    names a symbol they do not hold, replaced by its count, inexact: a formula is never
    reported that is wrong where it was measured."""
    terms = cost.terms
    if all(term.holds_at(cost.dims) for term in terms.values()):
        return cost
    kept = {
        name: term if term.holds_at(cost.dims) else Term.of_count(term.count)
        for name, term in terms.items()
    }
    return _with_terms(cost, kept, cost.dims, cost.fixed)


def _inexact(cost: Cost) -> Cost:
    terms = {name: dataclasses.replace(term, exact=False) for name, term in cost.terms.items()}
    return _with_terms(cost, terms, cost.dims, cost.fixed)


def _with_terms(
    cost: Cost, terms: Mapping[str, Term], dims: Mapping[str, int], fixed: Mapping[str, int]
) -> Cost:
    return cost.with_terms(terms, dims=dims, fixed=fixed)


def _moves_from_zero(runner: Runner, at: Mapping[str, Size], base: Run, axis: Axis) -> bool:
    """Whether a dim of size 0 (never changed by a study: no value is near it) runs other
    ops at size 2 than at 0 (torch's empty-input paths: attention on an empty batch sums
    its inputs times 0), or cannot run there: its count at 0 says nothing of other sizes."""
    size = at[axis.keys[0]]
    if size_value(size) != 0:
        return False
    run = runner.counted({**at, **axis.assign((2, *size[1:]) if isinstance(size, tuple) else 2)})
    return run is None or run.ops != base.ops


def _is_one(size: Size) -> bool:
    """A size fitted from 2 up: 1 (torch may run other kernels there) or 0 (no work)."""
    return size_value(size) in (0, 1)


def _names(axis: Axis) -> set[str]:
    return {axis.name, *(key.removeprefix(OWN) for key in axis.keys)}


def _fit_at(
    runner: Runner, at: Mapping[str, Size], axes: Sequence[Axis], base: Run | None = None
) -> _Fitting | None:
    """The op-by-op fit at sizes ``at``: a run with each axis changed alone, and a check
    with all of them changed at once (None where the body does not run at ``at``)."""
    base = base if base is not None else runner.run(at)
    if base is None:
        return None
    runs = [base]
    points: list[dict[str, Size]] = [{}]
    varied: list[Axis] = []
    for axis in axes:
        found = study(runner, at, base, axis)
        if found.regular and found.run is not None and found.value is not None:
            varied.append(axis)
            runs.append(found.run)
            points.append({axis.name: found.value})
    checked = not varied
    others: list[tuple[Run, dict[str, int]]] = []
    for attempt in range(3 if varied else 0):
        change: dict[str, Size] = {}
        sizes: dict[str, Size] = {}
        for index, axis in enumerate(varied):
            value = third(at[axis.keys[0]], points[1 + index][axis.name], attempt)
            change.update(axis.assign(value))
            sizes[axis.name] = value
        run = runner.run({**at, **change})
        if run is not None and run.ops == base.ops:
            runs.append(run)
            points.append(sizes)
            checked = True
            break
        if run is not None:
            others.append((run, {name: size_value(size) for name, size in sizes.items()}))
    own = {axis.name: at[axis.keys[0]] for axis in varied}
    assignments = [{**own, **point} for point in points]
    plan = Plan(assignments, [run.events for run in runs], [a.name for a in varied], checked)
    saved = [run.saved for run in runs]
    fitting = _Fitting(plan, fit(plan), saved, varied, _values(at, varied), others)
    if checked and varied and not fitting.exact():
        # (sizes the simple forms fit in no op: fitted again as products, from more runs)
        def refit(plan: Plan, saved: list[list[Event]]) -> bool:
            nonlocal fitting
            fitting = _Fitting(plan, fit(plan), saved, varied, fitting.values, others)
            return fitting.exact()

        fitted_further(runner, at, base, varied, points, plan, saved, refit, others)
    return fitting


def _values(at: Mapping[str, Size], axes: Sequence[Axis]) -> dict[str, int]:
    return {axis.name: size_value(at[axis.keys[0]]) for axis in axes}


def _repeat_symbols(probe: Probe, values: Mapping[str, int]) -> dict[int, sympy.Symbol]:
    """Names for a module's count of identical blocks that a rebuild can change."""
    rebuild = probe.rebuild
    if rebuild is None:
        return {}
    by_value: dict[int, list[str]] = {}
    for name, value in probe.repeats.items():
        if name in rebuild.sizes and rebuild.sizes[name] == value and name not in values:
            by_value.setdefault(value, []).append(name)
    return {
        value: sympy.Symbol(found[0])
        for value, found in by_value.items()
        if len(found) == 1 and value >= 2
    }


def _unverified_repeats(
    probe: Probe, repeat: Mapping[int, sympy.Symbol], values: Mapping[str, int]
) -> set[str]:
    """The module's counts of blocks that a rebuild can change but no ``n_layers * F``
    formula was confirmed for."""
    rebuild = probe.rebuild
    if rebuild is None or rebuild.declared:
        return set()
    named = {str(symbol) for symbol in repeat.values()}
    return {
        name
        for name, count in probe.repeats.items()
        if rebuild.sizes.get(name) == count and name not in values and name not in named
    }


def _verified_repeats(
    runner: Runner,
    at: Mapping[str, Size],
    probe: Probe,
    fitting: _Fitting,
    repeat: Mapping[int, sympy.Symbol],
    values: Mapping[str, int],
) -> dict[int, sympy.Symbol]:
    """The counts of blocks whose formula (``n_layers * F``) gives the count of a run with
    the module built with one more block; a count no such run confirms stays a number."""
    kept: dict[int, sympy.Symbol] = {}
    rebuild = probe.rebuild
    for count, symbol in repeat.items():
        assert rebuild is not None
        terms = fitting.terms({count: symbol})
        run = runner.counted({**at, rebuild.key(str(symbol)): count + 1})
        if run is None:
            continue
        if not _refuted(run, terms, {**values, str(symbol): count + 1}, probe):
            kept[count] = symbol
    return kept


def _refuted(
    run: Run | Counted, terms: Mapping[str, Term], values: Mapping[str, int], probe: Probe
) -> set[str]:
    """The exact terms whose formulas do not give ``run``'s counts at ``values``."""
    counts = run.counts()
    return {
        name
        for name in TERMS
        if terms[name].exact
        and not (name == "forward" and probe.declared is not None)
        and terms[name].at(values) != counts[name]
    }


def _mark_refuted(
    run: Run | Counted | None, terms: dict[str, Term], values: Mapping[str, int], probe: Probe
) -> None:
    """Mark inexact, in place, the terms a check ``run`` refutes at ``values`` (none where
    the body did not run there)."""
    if run is not None:
        for name in _refuted(run, terms, values, probe):
            terms[name] = dataclasses.replace(terms[name], exact=False)


def _over_sequence(
    runner: Runner, at: Mapping[str, Size], regular: Sequence[Axis], sequence: Sequence[Axis]
) -> dict[str, Term] | None:
    """The terms as polynomials in the ``sequence`` axes (whose values change the ops),
    each coefficient fitted op by op in the ``regular`` ones; None where none fits."""
    if not sequence:
        fitting = _fit_at(runner, at, regular)
        return None if fitting is None else fitting.terms()
    axis, rest = sequence[0], sequence[1:]
    size = at[axis.keys[0]]
    first = size[0] if isinstance(size, tuple) else size
    points: list[tuple[int, dict[str, Term]]] = []
    for value in points_from(first):
        moved: Size = (value, *size[1:]) if isinstance(size, tuple) else value
        found = _over_sequence(runner, {**at, **axis.assign(moved)}, regular, rest)
        if found is None:
            if not points:
                return None  # the body does not run at ``at`` itself
            continue
        points.append((size_value(moved), found))
        result = interpolated(points, sympy.Symbol(axis.name))
        if result is not None:
            return result
        if len(points) >= MAX_DEGREE + 2:
            return None
    return None


def _refuted_anywhere(
    runner: Runner,
    at: Mapping[str, Size],
    axes: Sequence[Axis],
    terms: Mapping[str, Term],
    values: Mapping[str, int],
    probe: Probe,
) -> bool:
    """Whether a run with every axis changed at once to a value no fit used gives other
    counts than the formulas (a run the body refuses confirms nothing and refutes nothing)."""
    for attempt in range(3):
        change: dict[str, Size] = {}
        sizes: dict[str, int] = {}
        for axis in axes:
            size = at[axis.keys[0]]
            value = third(size, size, attempt + 2)
            change.update(axis.assign(value))
            sizes[axis.name] = size_value(value)
        run = runner.counted({**at, **change})
        if run is not None:
            return bool(_refuted(run, terms, {**values, **sizes}, probe))
    return False


def _far_checked(
    runner: Runner,
    at: Mapping[str, Size],
    axes: Sequence[Axis],
    terms: dict[str, Term],
    values: Mapping[str, int],
    probe: Probe,
) -> dict[str, Term]:
    """The terms, those that runs with the call's dims far above and far below their
    values refute marked inexact (:mod:`.far_sizes`), then those that runs at the module's
    own sizes far off refute (:mod:`.own_far`)."""
    mark = functools.partial(_mark_refuted, probe=probe)
    terms = far_checked(runner, at, axes, terms, values, mark)
    return own_far_checked(runner, at, axes, terms, values, mark)


#: The most ops a far check of a size that loops may run (predicted from the base run),
#: and the most it goes to: past these a formula in that size is not shown far off, and
#: is not marked exact.
_LOOP_OPS = 65536
_LOOP_FAR_MOST = 8193


def _far_checked_loops(
    runner: Runner,
    at: Mapping[str, Size],
    axes: Sequence[Axis],
    terms: dict[str, Term],
    values: Mapping[str, int],
    probe: Probe,
) -> dict[str, Term]:
    """The terms, checked far from the call's sizes whose values change the ops (a loop over
    a size): at 2, and at 16·n + 1 (:func:`.far_sizes.far_value`) where a run there is
    affordable (its ops predicted as the base run's times the size's growth); where it is
    not, the terms in that size are marked inexact. A cap on a loop (``range(min(n, 64))``)
    shows only past it."""
    for axis in axes:
        size = at[axis.keys[0]]
        base = size_value(size)
        for up in (False, True):
            value = far_value(size, up, loop=True, loop_far=OWN_FAR)
            far = size_value(value)
            if far == base:
                continue
            if up and (far > _LOOP_FAR_MOST or runner.ops * far > _LOOP_OPS * base):
                terms = {
                    name: dataclasses.replace(term, exact=False)
                    if axis.name in {str(s) for s in term.formula.free_symbols}
                    else term
                    for name, term in terms.items()
                }
                continue
            run = runner.counted({**at, **axis.assign(value)})
            _mark_refuted(run, terms, {**values, axis.name: far}, probe)
    return terms


def _split_checked(
    runner: Runner,
    at: Mapping[str, Size],
    axes: Sequence[Axis],
    terms: dict[str, Term],
    values: Mapping[str, int],
    probe: Probe,
) -> dict[str, Term]:
    """The terms, those that a ``*batch`` or ``...`` dim split otherwise refutes marked
    inexact: its symbol is the product of its axes, so a formula in it must hold for any
    axes (a body that reduces over ``x.shape[0]`` alone does not)."""
    for axis in axes:
        size = at[axis.keys[0]]
        if not isinstance(size, tuple):
            continue
        for split in _other_splits(size):
            changed = {**values, axis.name: size_value(split)}
            _mark_refuted(runner.counted({**at, **axis.assign(split)}), terms, changed, probe)
    return terms


def _other_splits(size: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Axes for a variadic dim other than the first axis scaled (what the fits change):
    the last one grown, the first two merged, and one more axis in front."""
    found: list[tuple[int, ...]] = [(2, *size)]
    if len(size) >= 2:
        found.append((*size[:-1], size[-1] + 1))
        found.append((size[0] * size[1], *size[2:]))
    return [split for split in dict.fromkeys(found) if split != size]


def _cost(
    probe: Probe,
    base: Run,
    fitting: _Fitting,
    terms: Mapping[str, Term],
    bound: Mapping[str, Size],
    values: Mapping[str, int],
    changed: set[str],
    held: Sequence[Held],
) -> Cost:
    """The Cost: the base run's ops and counts, the terms, the call's dims and the sizes of
    its formulas, and the sizes that no run changed (``held``: the module's own)."""
    dims = {name: size_value(size) for name, size in bound.items()}
    used = {str(symbol) for term in terms.values() for symbol in term.formula.free_symbols}
    dims.update({name: values[name] for name in sorted(used - dims.keys()) if name in values})
    fixed = {name: size for name, size in dims.items() if name not in changed}
    # The sizes the module holds that no rebuild changes (all of them, where it cannot be
    # built again; a module passed to its constructor, where it can: :mod:`.held_sizes`).
    fixed = with_held(fixed, held, dims, changed)
    events = base.events
    return Cost(
        forward=terms["forward"],
        backward=terms["backward"],
        dims=dims,
        bytes_read=sum(event.bytes_read for event in events),
        bytes_written=sum(event.bytes_written for event in events),
        ops=op_costs(events, fitting.fitted),
        uncounted=uncounted(events),
        function=probe.function,
        matmul=terms["matmul"],
        recompute=terms["recompute"],
        activation=terms["activation"],
        fixed=fixed,
        assumed=assumed(events, lambda event: backward_of(event).events),
    )


def _fitted_above_one(probe: Probe, cost: Cost, stuck: Sequence[Axis], moving: bool) -> Cost:
    """``cost`` with the formulas fitted with the ``stuck`` dims at 2 (and changed from
    there) wherever they evaluate, at size 1, to ``cost``'s own counts. Where one does not
    and the ops at 1 differ from those at 2 (``moving``), the base run's is not exact."""
    dims = dict(probe.dims)
    for axis in stuck:
        for key in axis.keys:
            size = dims.get(key)
            if size is not None:
                dims[key] = (2, *size[1:]) if isinstance(size, tuple) else 2
    try:
        above: Cost | None = measure(dataclasses.replace(probe, dims=dims), shifted=True)
    except Exception:  # the call cannot run at 2: the base run's formulas stand
        above = None
    values = {**(above.dims if above is not None else {}), **cost.dims}
    # (one dim at 1, not tied to a module's size: the base run's formula is its piece at 1)
    lone = stuck[0] if len(stuck) == 1 and stuck[0].keys == (stuck[0].name,) else None
    size = None if lone is None else probe.dims.get(lone.name)
    piece = lone.name if lone is not None and size == 1 else None
    terms: dict[str, Term] = {}
    for name, term in cost.terms.items():
        if above is not None:
            candidate = above.terms[name]
            moved = Term(term.count, candidate.formula, candidate.exact)
            if moved.holds_at(values):
                terms[name] = moved
                continue
            if moving and piece is not None and term.exact and candidate.exact:
                formula = with_part_at_one(candidate.formula, piece, term.formula)
                terms[name] = Term(term.count, formula)
                continue
        terms[name] = dataclasses.replace(term, exact=False) if moving else term
    used = {str(symbol) for term in terms.values() for symbol in term.formula.free_symbols}
    shown = {**cost.dims, **{name: values[name] for name in sorted(used - cost.dims.keys())}}
    fixed = {name: size for name, size in cost.fixed.items() if name not in used}
    fitted = _with_terms(cost, terms, shown, fixed)
    return fitted if above is None else fitted.with_notes_of(above)
