"""Checks of a formula at a module's own sizes far from theirs, and off their multiples.

The fits change a module's own size to twice it (or one more, or half), the check run to
three times it, and the far checks take it to 16 times and a 16th of it: all multiples or
divisors of its value. A size the constructor rounds (a vocabulary padded to a multiple of
64, LLaMA's feed-forward width ``int(8 * dim / 3)`` rounded up to a multiple of 256) is
linear at every multiple of a large enough value: ``32768`` padded is ``32768`` at each of
them, and ``dim = 3072`` gives ``8 * dim / 3`` there, so a formula fitted there holds at
each of those runs and not at ``vocab = 50257`` or ``dim = 1024``. One more run per size,
alone, at 16 times it plus a few (the fewest of :data:`_OFF` that build: a width that
``n_heads`` must divide is taken to the next value they divide), shows such rounding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..types import Term
from .axes import Axis
from .fit import Size, size_value
from .orders import Mark, axes_at_one
from .runs import Counted, Run, Runner

__all__ = ["OWN_FAR", "own_far_checked"]

#: How far a module's own sizes are taken to check a formula (times their value).
OWN_FAR = 16

#: What is added to ``OWN_FAR`` times a size for the run off its multiples (each below the
#: size, so that the value is a multiple of no divisor of it above the one added; 1 for a
#: size of 1). The sizes are then taken there all at once.
_OFF = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256)


#: How far the sizes are taken (times, or a fraction of, their values), the first that
#: makes no size derived from them 1 where it was not (``n_head`` 16 times over at
#: ``d_model = 16 * n_head``: heads of width 1, their products run as multiplies).
_FACTORS = (OWN_FAR, OWN_FAR // 2, OWN_FAR // 4)


class _Ones:
    """Where the ops of the run at the call's own sizes take an axis of 1 (see
    :mod:`.orders`)."""

    def __init__(self, runner: Runner, at: Mapping[str, Size]) -> None:
        self.runner, self.at = runner, at
        self.shared: set[str] | None = None
        self.ones: set[tuple[str, int, int, tuple[int, ...]]] = set()

    def new_at(
        self,
        change: Mapping[str, Size],
        run: Run | Counted,
        terms: dict[str, Term],
        values: Mapping[str, int],
        mark: Mark,
    ) -> bool:
        """Whether ``run`` (at ``change``) would refute a term and takes an axis of 1 in an
        op where the call's own run never does: there torch lowers ops to others, and such
        a run refutes nothing."""
        trial = dict(terms)
        mark(run, trial, values)
        if all(trial[name].exact == term.exact for name, term in terms.items()):
            return False
        if self.shared is None:
            base = self.runner.run(dict(self.at))
            if base is None:
                return False
            self.shared = {event.op for event in base.events}
            self.ones = axes_at_one(base.events, self.shared)
        whole = self.runner.run({**self.at, **change})
        return whole is not None and not axes_at_one(whole.events, self.shared) <= self.ones


def own_far_checked(
    runner: Runner,
    at: Mapping[str, Size],
    axes: Sequence[Axis],
    terms: dict[str, Term],
    values: Mapping[str, int],
    mark: Mark,
) -> dict[str, Term]:
    """The terms, those that the module built at its own sizes far above and far below
    theirs refutes marked inexact (by ``mark``, with the run and the values of the
    formulas' symbols there): a branch on a module's size, ``if self.hidden > 64:`` fitted
    at 16, is seen by all of them ``OWN_FAR`` times over (a multiple, so that
    ``n_embd % n_head`` still divides) or that many times under (at least 2), else, where
    the module cannot be built so, each alone; a size the constructor rounds, by each alone
    at a value off the multiples of its own (:data:`_OFF`), and so is a call's dim tied to
    a module's size (the input's ``dim`` with the ``dim`` the module is built with)."""
    own = [axis for axis in axes if not axis.far and isinstance(at[axis.keys[0]], int)]
    ones = _Ones(runner, at)
    for up in (True, False):
        attempts = [own, *([axis] for axis in own)] if len(own) > 1 else [own]
        for index, together in enumerate(attempts if own else []):
            for factor in _FACTORS:
                change: dict[str, Size] = {}
                sizes: dict[str, int] = {}
                for axis in together:
                    size = size_value(at[axis.keys[0]])
                    value = factor * size if up else max(2, size // factor)
                    change.update(axis.assign(value))
                    sizes[axis.name] = value
                run = runner.counted({**at, **change})
                excused = run is not None and ones.new_at(
                    change, run, terms, {**values, **sizes}, mark
                )
                if not excused:
                    break  # (else: a size derived from them is 1 there; nearer)
            if not excused:
                mark(run, terms, {**values, **sizes})
            if run is not None and index == 0:
                break  # all at once ran: each alone adds nothing
    # (a call's dim tied to a module's size too: its far checks are refused where the
    # module needs a multiple, ``dim % n_heads``)
    tied = [axis for axis in axes if axis.far and len(axis.keys) > 1]
    off: dict[str, Size] = {}
    off_values: dict[str, int] = {}
    for axis in [*own, *(axis for axis in tied if isinstance(at[axis.keys[0]], int))]:
        if not any(term.exact for term in terms.values()):
            break
        size = size_value(at[axis.keys[0]])
        # (a size of 1 divides everything: taken to 17, it divides a width no more)
        for added in (step for step in _OFF if step < max(size, 2)):
            value = OWN_FAR * size + added
            run = runner.counted({**at, **axis.assign(value)})
            if run is not None:
                mark(run, terms, {**values, axis.name: value})
                off.update(axis.assign(value))
                off_values[axis.name] = value
                break
    # (and all of them at once: ``hidden * k // 2`` is floored only where both are odd)
    if len(off_values) >= 2 and any(term.exact for term in terms.values()):
        mark(runner.counted({**at, **off}), terms, {**values, **off_values})
    return terms
