"""Dry runs under ``FakeTensorMode`` at several sizes, and the Cost they add up to.

A :class:`Probe` knows how to build a call at any sizes of its dims (tensors from
annotations or from the shapes of a call that ran, a module's parameters as fake copies, or
a typed module rebuilt at other sizes). :func:`measure` runs it at the base sizes, once per
dim with that dim changed, and once with all changed; :mod:`.fit` turns the runs into
formulas. Fake tensors carry shapes, dtypes and devices but no storage, so nothing is
allocated, and kernels are chosen as on the device the call would run on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ...config import disabled
from ...errors import ContractError
from ..types import Cost, OpCost
from .backward import backward_of
from .events import Event
from .fit import Plan, Size, evaluate, fit, size_value, total
from .kernels import meta_target
from .saved import SavedTensors
from .session import RunSession

__all__ = ["Probe", "Run", "measure", "run_once"]

Thunk = Callable[[], Any]


@dataclass
class Probe:
    """A call that can be built at any sizes of its dims.

    ``dims`` are the base sizes of every dim of the call, ``variable`` those that may be
    changed independently, ``names`` other named sizes (a module's own), ``repeats`` names
    for a module's count of repeated blocks, ``build`` makes the call at an assignment of
    sizes with its tensors on a device (``"meta"``), ``device`` the device type the call
    would run on, ``declared`` a ``flops=`` formula replacing the outermost call's count.
    """

    function: str
    dims: dict[str, Size]
    variable: list[str]
    build: Callable[[Mapping[str, Size], str], Thunk]
    device: str = "cpu"
    names: dict[str, int] = field(default_factory=dict)
    repeats: dict[str, int] = field(default_factory=dict)
    declared: sympy.Expr | None = None


@dataclass
class Run:
    """The events of one dry run, the dims its outermost call bound, and the bytes of the
    activations autograd saved for backward (each storage once, weights not included)."""

    events: list[Event]
    bound: dict[str, Size]
    saved: list[Event] = field(default_factory=list)


@contextlib.contextmanager
def _quiet_fake_tensors() -> Iterator[None]:
    """Keep FakeTensorMode from logging the errors of runs at sizes the body refuses (a
    changed dim that the weights fix): those runs are expected to fail, quietly."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_once(probe: Probe, assignment: Mapping[str, Size], *, fake: bool = False) -> Run:
    """Run the probe's call once at ``assignment`` and collect its events (and backward).

    On ``meta`` tensors (the default: fast, and tensors made inside the body are meta too),
    attention taking the kernel the call's device would pick; with ``fake=True`` under
    ``FakeTensorMode`` on the call's own device (slower; for bodies that mix in tensors
    that are not arguments, such as module-level constants).
    """
    target = None if fake else probe.device
    if target == "meta":
        target = meta_target()
    session = RunSession(probe.function, target)
    device = probe.device if fake else "meta"
    mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()
    saved = SavedTensors()
    session.saved = saved
    with mode, torch.device(device), disabled(False), _quiet_fake_tensors():
        thunk = probe.build(assignment, device)
        with (
            session.active(),
            torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack),
        ):
            _finish(thunk())
    for event in session.events:
        # A repeated block's events share their first call's list: filled once.
        if event.needs_grad and not event.backward:
            event.backward.extend(backward_of(event).events)
    return Run(session.events, dict(session.bound), saved.events())


def _finish(result: Any) -> Any:
    """Run a coroutine or generator body to its end (a dry run costs the whole body)."""
    if inspect.iscoroutine(result):
        return _drive(result)
    if inspect.isgenerator(result):
        return list(result)
    if inspect.isasyncgen(result):

        async def drain() -> list[Any]:
            return [item async for item in result]

        return _drive(drain())
    return result


def _drive(coroutine: Any) -> Any:
    """Run a coroutine to completion without an event loop when it never waits on one."""
    try:
        while True:
            coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    except RuntimeError:
        coroutine.close()
        raise
    finally:
        with contextlib.suppress(RuntimeError):
            coroutine.close()


def _run_or_none(
    probe: Probe, assignment: Mapping[str, Size], ops: list[str], fake: bool
) -> Run | None:
    try:
        run = run_once(probe, assignment, fake=fake)
    except Exception:
        return None
    return run if [event.op for event in run.events] == ops else None


def _candidates(size: Size) -> list[Size]:
    if isinstance(size, tuple):
        if not size:
            return []
        return [(value, *size[1:]) for value in _candidates_int(size[0])]
    return list(_candidates_int(size))


def _candidates_int(value: int) -> list[int]:
    found = [2 * value, value + 1]
    if value % 2 == 0 and value // 2 >= 2:
        found.append(value // 2)
    return [v for v in dict.fromkeys(found) if v != value and v >= 1]


def _third(size: Size, taken: Size, attempt: int) -> Size:
    # A variadic dim is one symbol, the product of its sizes: both the change and the
    # check scale its first axis, so that each of its axes stays a function of the product.
    if isinstance(size, tuple):
        first = taken[0] if isinstance(taken, tuple) else taken
        return (_third_int(size[0], first, attempt), *size[1:])
    assert isinstance(taken, int)
    return _third_int(size, taken, attempt)


def _third_int(value: int, taken: int, attempt: int) -> int:
    options = [3 * value, value + 2, 5 * value, value + 3]
    options = [v for v in options if v not in (value, taken)]
    return options[attempt % len(options)]


def measure(probe: Probe, *, shifted: bool = False) -> Cost:
    """The cost of the probe's call at its base sizes, with formulas fitted in its dims.

    A dim of size 1 that could not be changed (torch takes another path at size 1: a view
    where a copy was, a sum over one element lowered away) is fitted from runs at size 2
    and up instead; a formula from there replaces the base run's where it gives the base
    run's count at size 1, so that every formula still evaluates to its count.
    """
    fake = False
    try:
        base = run_once(probe, probe.dims)
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        if isinstance(exc, ContractError):
            raise
        fake = True  # e.g. a module-level tensor the body uses: meta cannot mix with it
        base = run_once(probe, probe.dims, fake=True)
    ops = [event.op for event in base.events]
    runs = [base.events]
    saved = [base.saved]
    assignments: list[dict[str, Size]] = [dict(probe.dims)]
    varied: list[str] = []
    for name in probe.variable:
        for candidate in _candidates(probe.dims[name])[:3]:
            assignment = {**probe.dims, name: candidate}
            found = _run_or_none(probe, assignment, ops, fake)
            if found is not None:
                varied.append(name)
                runs.append(found.events)
                saved.append(found.saved)
                assignments.append(assignment)
                break
    checked = not varied
    for attempt in range(3 if varied else 0):
        assignment = dict(probe.dims)
        for index, name in enumerate(varied):
            assignment[name] = _third(probe.dims[name], assignments[1 + index][name], attempt)
        found = _run_or_none(probe, assignment, ops, fake)
        if found is not None:
            runs.append(found.events)
            saved.append(found.saved)
            assignments.append(assignment)
            checked = True
            break
    dims = {**base.bound, **probe.dims}
    # A count of repeated blocks is not an axis size: no constant is named after it.
    names = _fixed_names(
        {name: size for name, size in dims.items() if name not in probe.repeats},
        varied,
        {name: size for name, size in probe.names.items() if name not in probe.repeats},
    )
    plan = Plan(assignments, runs, varied, checked, names)
    fitted = fit(plan)
    cost = assemble(probe, plan, fitted.forward, fitted.backward, fitted.exact, dims)
    cost = _with_activations(cost, probe, plan, saved)
    stuck = [
        name for name in probe.variable if name not in varied and size_value(probe.dims[name]) == 1
    ]
    if stuck and not shifted:
        cost = _fitted_above_one(probe, cost, stuck)
    return cost


_FORMULAS = (
    ("flops", "formula"),
    ("backward_flops", "backward_formula"),
    ("matmul_flops", "matmul_formula"),
    ("recompute_flops", "recompute_formula"),
    ("activation_bytes", "activation_formula"),
)


def _fitted_above_one(probe: Probe, cost: Cost, stuck: list[str]) -> Cost:
    """``cost`` with the formulas fitted with the ``stuck`` dims at 2 (and varied from
    there) wherever they evaluate, at size 1, to ``cost``'s own counts."""
    dims = dict(probe.dims)
    for name in stuck:
        size = dims[name]
        dims[name] = (2, *size[1:]) if isinstance(size, tuple) else 2
    try:
        above = measure(dataclasses.replace(probe, dims=dims), shifted=True)
    except Exception:  # the call cannot run at 2: the base run's formulas stand
        return cost
    values = dict(cost.dims)
    changes: dict[str, Any] = {}
    for count_field, formula_field in _FORMULAS:
        formula: sympy.Expr = getattr(above, formula_field)
        if not {str(symbol) for symbol in formula.free_symbols} <= values.keys():
            continue
        if evaluate(formula, values) == getattr(cost, count_field):
            changes[formula_field] = formula
    return dataclasses.replace(cost, **changes) if changes else cost


def _with_activations(cost: Cost, probe: Probe, plan: Plan, saved: list[list[Event]]) -> Cost:
    """The activation bytes of the base run, fitted like FLOPs (each saved storage's shape),
    the bytes saved in each of k identical blocks written ``n_layers * B`` as FLOPs are."""
    count = sum(event.flops for event in saved[0])
    formula: sympy.Expr = sympy.Integer(count)
    if all([e.op for e in run] == [e.op for e in saved[0]] for run in saved) and count:
        bytes_plan = dataclasses.replace(plan, runs=saved, _series={}, _rules={})
        fitted = fit(bytes_plan)
        values = {name: size_value(size) for name, size in cost.dims.items()}
        repeat = _repeat_symbols(probe.repeats, plan.names, values)
        candidate = _with_repeats(saved[0], fitted.forward, repeat)
        if fitted.exact and evaluate(candidate, values) == count:
            used = {str(s) for s in candidate.free_symbols}
            formula = candidate if used <= set(cost.dims) else formula
    return dataclasses.replace(cost, activation_bytes=count, activation_formula=formula)


def _fixed_names(
    dims: Mapping[str, Size], varied: Sequence[str], extra: Mapping[str, int]
) -> dict[int, str]:
    """Names for sizes that stayed fixed: the call's own dims first, then the module's.

    A value that two names share at the same level is left a number (naming it after
    either could be wrong), and so are 0 and 1.
    """
    names: dict[int, str] = {}
    blocked: set[int] = set()
    fixed = {name: size_value(size) for name, size in dims.items() if name not in varied}
    for level in (fixed, {n: v for n, v in extra.items() if n not in dims}):
        by_value: dict[int, set[str]] = {}
        for name, value in level.items():
            by_value.setdefault(value, set()).add(name)
        for value, found in by_value.items():
            if value < 2 or value in names or value in blocked:
                continue
            if len(found) == 1:
                names[value] = found.pop()
            else:
                blocked.add(value)
    return names


def assemble(
    probe: Probe,
    plan: Plan,
    forward: Sequence[sympy.Expr],
    backward: Sequence[sympy.Expr],
    exact: bool,
    dims: Mapping[str, Size],
) -> Cost:
    """Per-op costs of the base run, grouped by the call the user wrote, and their sum."""
    events = plan.runs[0]
    values = {name: size_value(size) for name, size in dims.items()}
    for value, name in plan.names.items():
        values.setdefault(name, value)
    ops: list[OpCost] = []
    start = 0
    while start < len(events):
        end = start + 1
        while end < len(events) and events[end].group.serial == events[start].group.serial:
            end += 1
        ops.append(_op_cost(events[start:end], forward[start:end], backward[start:end]))
        start = end
    flops = sum(op.flops for op in ops)
    backward_flops = sum(op.backward_flops for op in ops)
    repeat = _repeat_symbols(probe.repeats, plan.names, values)
    formula = _with_repeats(events, forward, repeat)
    backward_formula = _with_repeats(events, backward, repeat)
    for name in repeat.values():
        values[str(name)] = probe.repeats[str(name)]
    matmul_forward = [
        formula if event.entry is not None and event.entry.matmul else sympy.Integer(0)
        for event, formula in zip(events, forward, strict=True)
    ]
    matmul_flops = sum(e.flops for e in events if e.entry is not None and e.entry.matmul)
    matmul_formula = _with_repeats(events, matmul_forward, repeat)
    if evaluate(matmul_formula, values) != matmul_flops:
        matmul_formula = sympy.Integer(matmul_flops)
    recompute_flops = sum(e.flops for e in events if e.recomputed)
    recompute_formula = _with_repeats(
        events,
        [f if e.recomputed else sympy.Integer(0) for e, f in zip(events, forward, strict=True)],
        repeat,
    )
    if evaluate(recompute_formula, values) != recompute_flops:
        recompute_formula = sympy.Integer(recompute_flops)
    if probe.declared is not None:
        formula = probe.declared
        flops = int(evaluate(formula, values))
    if evaluate(formula, values) != flops:
        formula, exact = sympy.Integer(flops), False
    if evaluate(backward_formula, values) != backward_flops:
        backward_formula, exact = sympy.Integer(backward_flops), False
    used = {
        str(s)
        for f in (formula, backward_formula, matmul_formula, recompute_formula)
        for s in f.free_symbols
    }
    shown = {name: values[name] for name in dims}
    shown.update({name: values[name] for name in sorted(used - set(shown))})
    return Cost(
        flops=flops,
        backward_flops=backward_flops,
        formula=formula,
        backward_formula=backward_formula,
        dims=shown,
        bytes_read=sum(op.bytes_read for op in ops),
        bytes_written=sum(op.bytes_written for op in ops),
        ops=tuple(ops),
        uncounted=_uncounted(events),
        function=probe.function,
        exact=exact,
        matmul_flops=matmul_flops,
        matmul_formula=matmul_formula,
        recompute_flops=recompute_flops,
        recompute_formula=recompute_formula,
    )


def _repeat_symbols(
    repeats: Mapping[str, int], names: Mapping[int, str], values: Mapping[str, int]
) -> dict[int, sympy.Symbol]:
    by_value: dict[int, list[str]] = {}
    for name, value in repeats.items():
        by_value.setdefault(value, []).append(name)
    return {
        value: sympy.Symbol(found[0])
        for value, found in by_value.items()
        if len(found) == 1
        and value >= 2
        and (names.get(value, found[0]) == found[0])
        and values.get(found[0], value) == value
    }


def _with_repeats(
    events: Sequence[Event], formulas: Sequence[sympy.Expr], repeat: Mapping[int, sympy.Symbol]
) -> sympy.Expr:
    """The sum of the formulas, with k identical calls of one block written ``n_layers * F``
    when the module names k (its ``num_layers`` beside a ``ModuleList`` of k blocks)."""
    own: list[sympy.Expr] = []
    calls: dict[int, list[sympy.Expr]] = {}
    names: dict[int, tuple[str, ...]] = {}
    for event, formula in zip(events, formulas, strict=True):
        if len(event.calls) >= 2:
            calls.setdefault(event.calls[1], []).append(formula)
            names[event.calls[1]] = event.path[:2]
        else:
            own.append(formula)
    if not repeat:
        return total([*own, *(f for group in calls.values() for f in group)])
    blocks: dict[tuple[tuple[str, ...], sympy.Expr], int] = {}
    for serial, group in calls.items():
        key = (names[serial], total(group, factor=False))
        blocks[key] = blocks.get(key, 0) + 1
    terms = list(own)
    for (_, formula), count in blocks.items():
        terms.append(repeat.get(count, count) * formula)
    summed = sympy.expand(sympy.Add(*terms))
    return sympy.factor(summed) if summed.free_symbols else summed


def _op_cost(
    events: Sequence[Event], forward: Sequence[sympy.Expr], backward: Sequence[sympy.Expr]
) -> OpCost:
    first = events[0]
    free = all(event.entry is None and event.counted for event in events)
    return OpCost(
        op=first.group.name,
        pattern=first.group.pattern,
        flops=sum(event.flops for event in events),
        formula=total(forward),
        backward_flops=sum(sum(b.flops for b in event.backward) for event in events),
        backward_formula=total(backward),
        bytes_read=sum(event.bytes_read for event in events),
        bytes_written=sum(event.bytes_written for event in events),
        view=all(event.view for event in events) if free else None,
        path=first.path,
    )


def _uncounted(events: Sequence[Event]) -> tuple[str, ...]:
    found: list[str] = []
    for event in events:
        if not event.counted:
            found.append(event.op)
        if event.needs_grad:
            found.extend(backward_of(event).uncounted)
    return tuple(dict.fromkeys(found))
