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
from .orders import Mark
from .runs import Runner

__all__ = ["OWN_FAR", "own_far_checked"]

#: How far a module's own sizes are taken to check a formula (times their value).
OWN_FAR = 16

#: What is added to ``OWN_FAR`` times a size for the run off its multiples (each below the
#: size, so that the value is a multiple of no divisor of it above the one added).
_OFF = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256)


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
    for up in (True, False):
        attempts = [own, *([axis] for axis in own)] if len(own) > 1 else [own]
        for index, together in enumerate(attempts if own else []):
            change: dict[str, Size] = {}
            sizes: dict[str, int] = {}
            for axis in together:
                size = size_value(at[axis.keys[0]])
                value = OWN_FAR * size if up else max(2, size // OWN_FAR)
                change.update(axis.assign(value))
                sizes[axis.name] = value
            run = runner.counted({**at, **change})
            mark(run, terms, {**values, **sizes})
            if run is not None and index == 0:
                break  # all at once ran: each alone adds nothing
    # (a call's dim tied to a module's size too: its far checks are refused where the
    # module needs a multiple, ``dim % n_heads``)
    tied = [axis for axis in axes if axis.far and len(axis.keys) > 1]
    for axis in [*own, *(axis for axis in tied if isinstance(at[axis.keys[0]], int))]:
        if not any(term.exact for term in terms.values()):
            break
        size = size_value(at[axis.keys[0]])
        for added in (step for step in _OFF if step < size):
            value = OWN_FAR * size + added
            run = runner.counted({**at, **axis.assign(value)})
            if run is not None:
                mark(run, terms, {**values, axis.name: value})
                break
    return terms
