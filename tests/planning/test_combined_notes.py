"""A cost built from others keeps every ``uncounted`` op and ``assumed`` line they carry,
each once, in the order first met."""

from __future__ import annotations

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from typedflops.cost.types import Cost, Term

_NOTES = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4).map(tuple)


def _cost(uncounted: tuple[str, ...], assumed: tuple[str, ...]) -> Cost:
    zero = Term(0, sympy.Integer(0))
    return Cost(
        forward=zero,
        backward=zero,
        dims={},
        bytes_read=0,
        bytes_written=0,
        uncounted=uncounted,
        assumed=assumed,
    )


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(_NOTES, _NOTES), min_size=1, max_size=4))
def test_a_cost_built_from_others_never_loses_their_notes(
    notes: list[tuple[tuple[str, ...], tuple[str, ...]]],
) -> None:
    costs = [_cost(uncounted, assumed) for uncounted, assumed in notes]
    built = costs[0].with_notes_of(*costs[1:])
    seen_uncounted = [name for cost in costs for name in cost.uncounted]
    seen_assumed = [line for cost in costs for line in cost.assumed]
    assert built.uncounted == tuple(dict.fromkeys(seen_uncounted))
    assert built.assumed == tuple(dict.fromkeys(seen_assumed))


def test_notes_are_kept_once_in_the_order_first_met() -> None:
    first = _cost(("aten.foo",), ("ids taken as distinct",))
    second = _cost(("aten.bar", "aten.foo"), ("none equal to padding_idx", "ids taken as distinct"))
    built = first.with_notes_of(second)
    assert built.uncounted == ("aten.foo", "aten.bar")
    assert built.assumed == ("ids taken as distinct", "none equal to padding_idx")
