"""Formulas from runs at several sizes: every formula a verified function of the dims.

A body is dry-run at its base sizes, once more per dim with that dim changed, and once with
every dim changed at once (the check). The runs give, for each op, the size of every axis it
saw at each set of sizes; each axis size is fitted as a monomial ``c * b**i * s**j`` (``c``
rational, so ``d/2`` and ``3*d`` fit) or, failing that, an affine function (``s + 1``), or,
from a few more runs made only then, a product of one factor per dim (:mod:`.families`). The
op's rule is then applied to the fitted sizes, giving its FLOPs as a formula in the dims
(``2*b*s*d*k`` for a matmul), and the check run must agree, op by op. Nothing is inferred
from names, and nothing is assumed about which ops keep which axes: reshapes, tensors made
inside the body and anything torch does between the ops are seen only through the sizes.

A size that stays constant across all runs is a number: a name is only ever a dim that the
runs changed (a module's own sizes are changed by building the module again, see
:mod:`.rebuild`), never a guess from a value two sizes may share.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import sympy

from ...errors import BranchOnSizes, NotPolynomial
from ..types import tidy
from .events import Event
from .families import product_of_factors
from .memo import fit_key
from .opcall import OpCall, Rule
from .sums import sum_of_parts
from .tensors import TensorMeta, flat_tensors, map_meta

__all__ = ["Fitted", "Plan", "axis_sizes", "fit", "fit_count", "fit_event", "fit_size"]

Size = int | tuple[int, ...]

_MAX_EXPONENT = 4


def size_value(size: Size) -> int:
    """A dim's value: its size, or the product of a variadic dim's sizes."""
    return size if isinstance(size, int) else math.prod(size)


@dataclass
class Plan:
    """Runs of one body: ``runs[0]`` at the base sizes, ``runs[1 + i]`` with ``varied[i]``
    changed, and (when ``checked``) a run with every varied dim changed (the check); where
    ``more`` (the simple forms fitted some size of no op), after those ``runs[check + 1 + i]``
    with ``varied[i]`` changed alone to a third value, a run with every varied dim changed
    again, then those of ``pairs`` (:mod:`.families`). ``assignments[i]`` holds the value
    of each varied dim (by its name in formulas) in run ``i``."""

    assignments: list[dict[str, Size]]
    runs: list[list[Event]]
    varied: list[str]
    checked: bool
    _series: dict[tuple[int, ...], tuple[sympy.Expr | None, bool]] = field(default_factory=dict)
    _rules: dict[Any, sympy.Expr | None] = field(default_factory=dict)
    _values: dict[int, dict[sympy.Symbol, int]] = field(default_factory=dict)
    more: bool = False
    #: Runs with two varied dims changed together (to their values in their runs alone),
    #: by the pair of their indices: made for sizes in which those two dims do not factor
    #: apart (``d + 2*d*n_kv/n_head``); ``mixed`` the pairs a fit asked for.
    pairs: dict[tuple[int, int], int] = field(default_factory=dict)
    mixed: set[tuple[int, int]] = field(default_factory=set)

    def x(self, run: int, index: int) -> int:
        """The value of varied dim ``index`` in run ``run``."""
        return size_value(self.assignments[run][self.varied[index]])

    @property
    def check(self) -> int:
        """The index of the check run (every varied dim changed), the last one unless
        ``more``."""
        return len(self.varied) + 1 if self.more else len(self.runs) - 1


@dataclass
class Fitted:
    """Per base event: its forward and backward formulas, the formula of its forward's
    matrix products (:attr:`Event.matmul_flops`), and whether each was verified; and
    whether its count, forward or backward, branches on the sizes (:class:`BranchOnSizes`:
    fitted from its counts, verified at the runs only, so its row is not exact, while the
    terms it sums into are checked far off too)."""

    forward: list[sympy.Expr]
    backward: list[sympy.Expr]
    forward_exact: list[bool]
    backward_exact: list[bool]
    matmul: list[sympy.Expr] = field(default_factory=list)
    matmul_exact: list[bool] = field(default_factory=list)
    branches: list[bool] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Whether every formula was verified."""
        return all(self.forward_exact) and all(self.backward_exact) and all(self.matmul_exact)


def fit(plan: Plan) -> Fitted:
    """Formulas for every event of ``plan.runs[0]`` (a count where none could be verified)."""
    base = plan.runs[0]
    found = Fitted([], [], [], [])
    # Events copied from a repeated block's first call, in every run, are fitted as their
    # originals were (the next of 96 identical layers is not fitted again).
    Known = tuple[sympy.Expr, bool, sympy.Expr, bool, sympy.Expr, bool, bool]
    fitted: dict[tuple[int, ...], Known] = {}
    # Events alike in every run (the next of 10,000 equal layers, not repeated as a block)
    # fit to the same formulas: fitted once, by what the fit reads of them.
    alike: dict[tuple[Any, ...], Known] = {}
    for position in range(len(base)):
        series = [run[position] for run in plan.runs]
        origins = tuple(id(event.origin) if event.origin is not None else 0 for event in series)
        known = fitted.get(origins) if all(origins) else None
        key = fit_key(series) if known is None else None
        if key is not None:
            known = alike.get(key)
        if known is None:
            branched: list[bool] = []
            expr, ok = fit_event(plan, series, branched=branched)
            back_expr, back_ok = _fit_backward(plan, series, branched)
            if all(event.matmul_flops == event.flops for event in series):
                matmul, matmul_ok = expr, ok  # a matrix product's (or no product's)
            else:  # a fused kernel's products, fitted by their own rule
                matmul, matmul_ok = fit_event(plan, series, matmul=True)
            known = (expr, ok, back_expr, back_ok, matmul, matmul_ok, any(branched))
            keys = tuple(id(event.origin or event) for event in series)
            fitted[keys] = known
            if key is not None:
                alike[key] = known
        found.forward.append(known[0])
        found.forward_exact.append(known[1])
        found.backward.append(known[2])
        found.backward_exact.append(known[3])
        found.matmul.append(known[4])
        found.matmul_exact.append(known[5])
        found.branches.append(known[6])
    return found


def _fit_backward(plan: Plan, series: list[Event], branched: list[bool]) -> tuple[sympy.Expr, bool]:
    return fit_events(plan, [event.backward for event in series], branched=branched)


def fit_events(
    plan: Plan, lists: Sequence[Sequence[Event]], *, branched: list[bool] | None = None
) -> tuple[sympy.Expr, bool]:
    """The FLOPs of a list of ops seen in each run (one op's backward, the forward a
    Function's backward ran again) as one formula: op by op where the lists run the same
    ops, else their counts fitted (``branched`` as for :func:`fit_event`)."""
    base = lists[0]
    if len({len(ops) for ops in lists}) == 1 and all(
        [b.op for b in ops] == [b.op for b in base] for ops in lists
    ):
        total: sympy.Expr = sympy.Integer(0)
        exact = True
        for position in range(len(base)):
            expr, ok = fit_event(plan, [ops[position] for ops in lists], branched=branched)
            total += expr
            exact &= ok
        return total, exact
    return fit_count(plan, [sum(b.flops for b in ops) for ops in lists])


def fit_event(
    plan: Plan,
    series: list[Event],
    *,
    matmul: bool = False,
    branched: list[bool] | None = None,
) -> tuple[sympy.Expr, bool]:
    """One op's FLOPs, seen once in each run, as a formula: its rule applied to its axis
    sizes fitted across the runs, else its counts fitted (see :func:`fit_count`).
    ``matmul``: the FLOPs of its matrix products (:attr:`Event.matmul_flops`) instead, by
    the rule of its products where its entry has one. Where the rule's count branches on
    the sizes (:class:`BranchOnSizes`) its counts are fitted, and True is put in
    ``branched`` (without a list to tell, the formula is not exact)."""
    base = series[0]
    counts = [event.matmul_flops if matmul else event.flops for event in series]
    if all(count == 0 for count in counts):
        return sympy.Integer(0), True
    entry = base.entry
    rule = None if entry is None else entry.rule
    if matmul and entry is not None and not entry.matmul:
        rule = entry.matmul_part
    if entry is not None and entry.symbolic and rule is not None:
        columns = [axis_sizes(event) for event in series]
        if len({len(column) for column in columns}) == 1:
            fitted: list[sympy.Expr] = []
            exact = True
            for values in zip(*columns, strict=True):
                expr, ok = _fit_series(plan, tuple(values))
                if expr is None:
                    break
                fitted.append(expr)
                exact &= ok
            else:
                formula = _apply_rule(plan, base, fitted, rule)
                if formula is _NO_FORMULA:
                    return sympy.Integer(counts[0]), False
                if formula is _BRANCHES:  # (its counts, fitted: verified at the runs)
                    if branched is None:
                        return fit_count(plan, counts)[0], False
                    branched.append(True)
                    return fit_count(plan, counts)
                if (
                    formula is not None
                    and _value(plan, formula, 0) == counts[0]
                    and (
                        not plan.checked or _value(plan, formula, plan.check) == counts[plan.check]
                    )
                    and (not plan.more or _holds(plan, formula, counts))
                ):
                    return formula, exact
    return fit_count(plan, counts)


def fit_count(plan: Plan, counts: Sequence[int]) -> tuple[sympy.Expr, bool]:
    """A count seen in every run (an op's FLOPs, the bytes saved for backward) as a formula
    in the varied dims; its base value, not exact, when it fits none."""
    expr, ok = _fit_series(plan, tuple(counts))
    if expr is None:
        return sympy.Integer(counts[0]), False
    return expr, ok


def fit_size(plan: Plan, values: tuple[int, ...]) -> sympy.Expr | None:
    """One axis's sizes, ``values[i]`` in run ``i``, as a verified formula in the varied
    dims (None where none is verified)."""
    expr, exact = _fit_series(plan, values)
    return expr if exact else None


def axis_sizes(event: Event) -> list[int]:
    """The sizes of every axis of the op's tensors, in order (as the fits see them)."""
    metas = flat_tensors((event.args, tuple(v for _, v in event.kwargs), event.out))
    return [size for meta in metas for size in meta.shape]


#: What :func:`_apply_rule` gives for a rule whose count is no polynomial in the sizes.
_NO_FORMULA = sympy.Symbol("_no_formula")
#: What it gives for a rule whose count branches on the sizes (:class:`BranchOnSizes`).
_BRANCHES = sympy.Symbol("_branches")


def _apply_rule(plan: Plan, event: Event, sizes: list[sympy.Expr], rule: Rule) -> sympy.Expr | None:
    remaining = iter(sizes)

    def symbolic(meta: TensorMeta) -> TensorMeta:
        return meta.with_shape(tuple(next(remaining) for _ in meta.shape))

    args = map_meta(event.args, symbolic)
    kwargs = tuple((key, map_meta(value, symbolic)) for key, value in event.kwargs)
    out = map_meta(event.out, symbolic)
    key: Any = (event.func, args, kwargs, out, rule)
    try:
        if key in plan._rules:
            return plan._rules[key]
    except TypeError:
        key = None
    try:
        value = rule(OpCall(event.op, args, dict(kwargs), out))
        formula: sympy.Expr | None = sympy.expand(sympy.sympify(value))
    except NotPolynomial:  # no formula holds: the count stays a number
        formula = _NO_FORMULA
    except BranchOnSizes:  # a formula holds on one side of a threshold: fitted, not exact
        formula = _BRANCHES
    except Exception:  # a rule that branches on sizes: fitted from its counts instead
        formula = None
    if key is not None:
        plan._rules[key] = formula
    return formula


def _value(plan: Plan, formula: sympy.Expr, run: int) -> Any:
    values = plan._values.get(run)
    if values is None:
        values = {
            sympy.Symbol(name): size_value(size) for name, size in plan.assignments[run].items()
        }
        plan._values[run] = values
    return formula.xreplace(values)


def _fit_series(plan: Plan, values: tuple[int, ...]) -> tuple[sympy.Expr | None, bool]:
    if values in plan._series:
        return plan._series[values]
    found = _monomial(plan, values)
    if found[0] is None:
        found = _affine(plan, values)
    if found[0] is None and plan.more:
        found = product_of_factors(plan, values)
        if found[0] is None:
            found = sum_of_parts(plan, values)
    elif found[0] is not None and plan.more and not _holds(plan, found[0], values):
        found = None, False  # (a form the check run confirmed, refuted by the last runs)
    plan._series[values] = found
    return found


def _monomial(plan: Plan, values: tuple[int, ...]) -> tuple[sympy.Expr | None, bool]:
    base = values[0]
    if base == 0 or any(v == 0 for v in values):
        return None, False
    exponents: list[int] = []
    for index in range(len(plan.varied)):
        run = 1 + index
        ratio = Fraction(values[run], base)
        step = Fraction(plan.x(run, index), plan.x(0, index))
        exponent = _exponent(ratio, step)
        if exponent is None:
            return None, False
        exponents.append(exponent)
    coefficient = Fraction(base)
    for index, exponent in enumerate(exponents):
        coefficient /= Fraction(plan.x(0, index)) ** exponent
    if plan.checked:
        predicted = coefficient
        for index, exponent in enumerate(exponents):
            predicted *= Fraction(plan.x(plan.check, index)) ** exponent
        if predicted != values[plan.check]:
            return None, False
    expr: sympy.Expr = sympy.Rational(coefficient.numerator, coefficient.denominator)
    for index, exponent in enumerate(exponents):
        if exponent:
            expr = expr * sympy.Symbol(plan.varied[index]) ** exponent
    return expr, plan.checked or not any(exponents)


def _exponent(ratio: Fraction, step: Fraction) -> int | None:
    if step == 1:
        return 0 if ratio == 1 else None
    for exponent in range(-_MAX_EXPONENT, _MAX_EXPONENT + 1):
        if step**exponent == ratio:
            return exponent
    return None


def _affine(plan: Plan, values: tuple[int, ...]) -> tuple[sympy.Expr | None, bool]:
    base = values[0]
    slopes: list[Fraction] = []
    for index in range(len(plan.varied)):
        run = 1 + index
        change = plan.x(run, index) - plan.x(0, index)
        if change == 0:
            return None, False
        slopes.append(Fraction(values[run] - base, change))
    intercept = Fraction(base) - sum(
        (slope * plan.x(0, index) for index, slope in enumerate(slopes)), Fraction(0)
    )
    if plan.checked:
        last = plan.check
        predicted = intercept + sum(
            (slope * plan.x(last, index) for index, slope in enumerate(slopes)), Fraction(0)
        )
        if predicted != values[last]:
            return None, False
    expr: sympy.Expr = sympy.Rational(intercept.numerator, intercept.denominator)
    for index, slope in enumerate(slopes):
        if slope:
            expr += sympy.Rational(slope.numerator, slope.denominator) * sympy.Symbol(
                plan.varied[index]
            )
    return expr, plan.checked or not any(slopes)


def _holds_at(plan: Plan, formula: sympy.Expr, values: Sequence[int], run: int) -> bool:
    return bool(_value(plan, formula, run) == values[run])


def _holds(plan: Plan, formula: sympy.Expr, values: Sequence[int]) -> bool:
    """Whether ``formula`` gives ``values[i]`` at the sizes of every run ``i``."""
    return all(_value(plan, formula, run) == value for run, value in enumerate(values))


def evaluate(formula: sympy.Expr, dims: Mapping[str, int]) -> Any:
    """``formula`` at ``dims`` (name to size)."""
    return formula.xreplace({sympy.Symbol(name): value for name, value in dims.items()})


def total(formulas: Iterable[sympy.Expr], *, factor: bool = True) -> sympy.Expr:
    """The sum of many formulas, grouped first (an LM repeats the same op formulas);
    ``factor`` writes it factored (``b*s*(2*d + 1)``), for the formulas people read."""
    counts: dict[sympy.Expr, int] = {}
    for formula in formulas:
        if formula != 0:
            counts[formula] = counts.get(formula, 0) + 1
    summed = sympy.expand(sympy.Add(*(k * f for f, k in counts.items())))
    return _factored(summed) if factor and summed.free_symbols else summed


@functools.lru_cache(maxsize=4096)
def _factored(expr: sympy.Expr) -> sympy.Expr:
    if expr.has(sympy.KroneckerDelta):
        return tidy(expr)  # (the part at sizes of 2 and up, then the parts at 1)
    return sympy.factor(expr)
