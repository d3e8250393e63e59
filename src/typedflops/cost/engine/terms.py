"""The terms of a Cost from a fit: per-op costs of the base run, and each count of
:data:`~.runs.TERMS` as a :class:`~typedflops.cost.types.Term` (its formula the sum of the
ops' formulas, ``n_layers * F`` for the calls of identical blocks)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import sympy

from ..types import OpCost, Term
from .backward import backward_of
from .events import Event
from .fit import Fitted, Plan, fit, fit_events, total

__all__ = ["fitted_terms", "held_rows", "op_costs", "uncounted", "with_repeats"]


def fitted_terms(
    plan: Plan,
    fitted: Fitted,
    saved: Sequence[Sequence[Event]],
    repeat: Mapping[int, sympy.Symbol],
    values: Mapping[str, int],
) -> dict[str, Term]:
    """Each term of the base run of ``plan``, its formula checked at ``values`` (a formula
    that does not give its count there is replaced by the count, not exact)."""
    events = plan.runs[0]

    def summed(
        counts: Sequence[int], formulas: Sequence[sympy.Expr], exact: Sequence[bool]
    ) -> Term:
        formula = with_repeats(events, formulas, repeat)
        return Term(sum(counts), formula, all(exact)).checked_at(values)

    backward = [sum(b.flops for b in e.backward) for e in events]
    return {
        "forward": summed([e.flops for e in events], fitted.forward, fitted.forward_exact),
        "backward": summed(backward, fitted.backward, fitted.backward_exact),
        # (each op's matrix products: a matmul's FLOPs, a fused kernel's products' part)
        "matmul": summed([e.matmul_flops for e in events], fitted.matmul, fitted.matmul_exact),
        "recompute": _recompute(plan, fitted, repeat, values),
        "activation": _activation(plan, saved, repeat, values),
    }


def _recompute(
    plan: Plan, fitted: Fitted, repeat: Mapping[int, sympy.Symbol], values: Mapping[str, int]
) -> Term:
    """The FLOPs run again in backward: the ops of checkpointed regions, and the forward a
    Function's backward runs again to differentiate it (reentrant checkpointing)."""
    events = plan.runs[0]
    parts: list[sympy.Expr] = []
    count = 0
    exact = True
    for position, event in enumerate(events):
        part: sympy.Expr = sympy.Integer(0)
        if event.recomputed:
            part = fitted.forward[position]
            exact &= fitted.forward_exact[position]
            count += event.flops
        if event.rerun:
            # (a count that branches on the sizes, fitted from its runs, as in the forward:
            # this term is checked far off)
            reruns = [run[position].rerun for run in plan.runs]
            rerun, ok = fit_events(plan, reruns, branched=[])
            part += rerun
            exact &= ok
            count += sum(e.flops for e in event.rerun)
        parts.append(part)
    return Term(count, with_repeats(events, parts, repeat), exact).checked_at(values)


def _activation(
    plan: Plan,
    saved: Sequence[Sequence[Event]],
    repeat: Mapping[int, sympy.Symbol],
    values: Mapping[str, int],
) -> Term:
    """The bytes saved for backward in the base run, fitted like FLOPs (each saved storage's
    shape), the bytes saved in each of k identical blocks written ``n_layers * B``."""
    count = sum(event.flops for event in saved[0])
    ops = [e.op for e in saved[0]]
    if not any(run for run in saved):
        return Term(0, sympy.Integer(0))
    if not all([e.op for e in run] == ops for run in saved):
        return Term.of_count(count)
    bytes_plan = dataclasses.replace(plan, runs=[list(run) for run in saved], _series={}, _rules={})
    fitted = fit(bytes_plan)
    formula = with_repeats(saved[0], fitted.forward, repeat)
    return Term(count, formula, all(fitted.forward_exact)).checked_at(values)


def with_repeats(
    events: Sequence[Event], formulas: Sequence[sympy.Expr], repeat: Mapping[int, sympy.Symbol]
) -> sympy.Expr:
    """The sum of the formulas, with k identical calls of one block written ``n_layers * F``
    when ``repeat`` names k (a module's ``n_layers`` beside a ``ModuleList`` of k blocks)."""
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


def op_costs(events: Sequence[Event], fitted: Fitted) -> tuple[OpCost, ...]:
    """The base run's ops, grouped by the call the user wrote, with their formulas."""
    ops: list[OpCost] = []
    start = 0
    while start < len(events):
        end = start + 1
        while end < len(events) and events[end].group.serial == events[start].group.serial:
            end += 1
        chunk = events[start:end]
        first = chunk[0]
        free = all(event.entry is None and event.counted for event in chunk)
        # (a count that branches on the sizes, fitted from its runs: its terms are checked
        # far off, its row is not, and is not exact)
        branches = any(fitted.branches[start:end])
        forward = Term(
            sum(event.flops for event in chunk),
            total(fitted.forward[start:end]),
            all(fitted.forward_exact[start:end]) and not branches,
        )
        backward = Term(
            sum(sum(b.flops for b in event.backward) for event in chunk),
            total(fitted.backward[start:end]),
            all(fitted.backward_exact[start:end]) and not branches,
        )
        ops.append(
            OpCost(
                op=first.group.name,
                pattern=first.group.pattern,
                forward=forward,
                backward=backward,
                bytes_read=sum(event.bytes_read for event in chunk),
                bytes_written=sum(event.bytes_written for event in chunk),
                view=all(event.view for event in chunk) if free else None,
                path=first.path,
            )
        )
        start = end
    return tuple(ops)


def held_rows(ops: Sequence[OpCost]) -> tuple[OpCost, ...]:
    """``ops`` with each formula that counts FLOPs marked inexact: rows fitted with a size
    held at its value (one whose values change the ops, as a loop over it does, or a dim of
    1 fitted from 2 up), which they name as a number, so that they hold at the call's
    sizes only. A row of no FLOPs (a view) stays exact."""

    def held(term: Term) -> Term:
        return term if term.formula == 0 else dataclasses.replace(term, exact=False)

    return tuple(
        dataclasses.replace(op, forward=held(op.forward), backward=held(op.backward)) for op in ops
    )


def uncounted(events: Sequence[Event]) -> tuple[str, ...]:
    """The ops that ran without a rule, forward and backward, each once."""
    found: list[str] = []
    for event in events:
        if not event.counted:
            found.append(event.op)
        if event.needs_grad:
            found.extend(backward_of(event).uncounted)
    return tuple(dict.fromkeys(found))
