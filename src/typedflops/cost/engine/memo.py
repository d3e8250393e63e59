"""What a dry run of a deep model works out once, not once per op: a count by one of torch's
shape formulas, remembered by the shapes it read, and the fit of an op seen alike in every
run (the next of 10,000 equal layers), remembered by what the fit reads of its events.

Both are pure functions of their keys: remembering them changes no count and no formula,
only how often they are worked out. A key that cannot be hashed (an argument that is a
slice) is worked out each time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["fit_key", "remembered_shapes"]

#: The most counts one shape formula remembers (past it, it starts over).
_MOST = 4096

_MISSING = object()


def remembered_shapes(formula: Callable[..., Any]) -> Callable[..., Any]:
    """``formula`` (one of torch's flop formulas, a function of its arguments' shapes and
    options) with its results remembered by its arguments.

    torch's ``addmm`` formula, for one, calls ``mm``'s through the wrapper that maps every
    argument to its shape, a pass over them per call; a dry run of 10,000 equal layers asks
    it the same question 10,000 times a run.
    """
    known: dict[Any, Any] = {}

    def count(*args: Any, out_shape: Any = None, **kwargs: Any) -> Any:
        try:
            key = (args, out_shape, tuple(kwargs.items()))
            found = known.get(key, _MISSING)
        except TypeError:  # (an argument no key can hold)
            return formula(*args, out_shape=out_shape, **kwargs)
        if found is _MISSING:
            found = formula(*args, out_shape=out_shape, **kwargs)
            if len(known) >= _MOST:
                known.clear()
            known[key] = found
        return found

    return count


def fit_key(series: Sequence[Any]) -> tuple[Any, ...] | None:
    """What fitting one op seen once in each run reads of its events (:class:`.events.Event`,
    not imported: the rules import this module, and the events the rules; each event's op, its
    arguments' and output's metadata, its rule and counts, and the same of each op of its
    backward), as a key: two positions of a run with equal keys fit to the same formulas.
    None where no key can be made (an argument that cannot be hashed)."""
    try:
        key = tuple(
            (
                _event_key(event),
                event.matmul_flops,
                tuple(_event_key(op) for op in event.backward),
            )
            for event in series
        )
        hash(key)
    except TypeError:
        return None
    return key


def _event_key(event: Any) -> tuple[Any, ...]:
    # (the rule entry by identity: entries are made once, at import, and the events hold
    # theirs for as long as the key is used)
    return (event.op, event.func, event.args, event.kwargs, event.out, event.flops, id(event.entry))
