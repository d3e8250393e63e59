"""Array annotations typedflops does not compile itself, checked with jaxtyping's semantics.

``Int[np.ndarray, "pos"]``, ``Float[LinearOperator, "*batch N N"]``, a duck array's
``Shaped[MyArray, "n"]``: typedflops compiles annotations of torch tensors; for any other
array type the check is jaxtyping's own ``isinstance`` (the value's type, its dtype by
jaxtyping's names, its shape), run in a jaxtyping memo that holds the call's dims. So a
numpy array's ``pos`` and a tensor's ``pos`` in one call are one dim, as they are under
``jaxtyped``, and the dims the array binds are the call's afterwards (for the tensors checked
after it, the return value, the report). The same checker takes a torch annotation that
typedflops' grammar does not read (``"min(a,b)"``) in a function the import hook decorated.

A check jaxtyping itself cannot make (an array type that ``isinstance`` rejects, a symbolic
axis naming an unbound dim) is left out and noted once, never raised.
"""

from __future__ import annotations

import re
import typing
from typing import Any

from jaxtyping._storage import pop_shape_memo, push_shape_memo

from ..errors import ContractError, DtypeError, ShapeError
from .annotation import array_type_name
from .memo import fill_memo, take_back
from .plain_hints import Checker, type_name
from .scope import CallState, is_compiling, shape_text, violation
from .unchecked import note

__all__ = ["annotation_label", "other_array_checker"]

_DTYPE_REASON = re.compile(r"this array has dtype (\S+), not")
_WRONG_TYPE = ("this value is not an instance", "this value does not have both")


def annotation_label(hint: Any) -> str:
    """``Float[LinearOperator, "*batch N N"]``: an annotation as its author wrote it."""
    dtype = getattr(hint.dtype, "__name__", "Shaped")
    return f'{dtype}[{array_type_name(hint)}, "{hint.dim_str}"]'


def _shape_of(value: Any) -> str:
    shape = getattr(value, "shape", None)
    try:
        return shape_text(tuple(int(size) for size in shape))  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return repr(shape)


def other_array_checker(hint: Any) -> Checker:
    """The checker of a jaxtyping annotation that jaxtyping's ``isinstance`` decides.

    >>> import numpy as np
    >>> from jaxtyping import Int
    >>> check = other_array_checker(Int[np.ndarray, "pos"])
    >>> state = CallState("f")
    >>> check(np.arange(3), state, "argument 'x'")
    >>> state.sizes
    {'pos': 3}
    >>> check(np.arange(4), state, "argument 'y'")
    Traceback (most recent call last):
    ...
    typedflops.errors.ShapeError: f(): argument 'y' has shape (4,), which its annotation \
Int[ndarray, "pos"] rejects: the size of dimension pos is 4 which does not equal the existing \
value of 3
      pos=3 was bound by argument 'x' (Int[ndarray, "pos"])
      bound so far: pos=3
    """
    label = annotation_label(hint)
    instance_reason = typing.cast(Any, hint).__instancecheck_str__
    names = tuple(dict.fromkeys(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", hint.dim_str)))

    def check(value: Any, state: CallState, where: str) -> None:
        if is_compiling():  # dynamo cannot trace jaxtyping's memo: checked eagerly only
            return
        memos = push_shape_memo(state.arguments or {})
        try:
            fill_memo(memos, state)
            try:
                reason = instance_reason(value)
            except Exception as exc:  # jaxtyping cannot decide: say so once, never refuse
                note(
                    f"{state.function}(): {where}: its annotation {label} is not checked "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
                )
                return
            if not reason:
                take_back(state, f"{where} ({label})")
                return
        finally:
            pop_shape_memo()
        if reason.startswith(_WRONG_TYPE):
            raise violation(
                ContractError,
                state,
                where,
                f"is {type_name(value)} but its annotation {label} needs "
                f"{'an array' if hint.array_type is Any else array_type_name(hint)}",
                expected=label,
                actual=type(value).__name__,
            )
        dtype = _DTYPE_REASON.match(reason)
        if dtype is not None:
            raise violation(
                DtypeError,
                state,
                where,
                f"has dtype {dtype.group(1)} but its annotation {label} needs "
                f"a {getattr(hint.dtype, '__name__', 'Shaped')} dtype",
                expected=label,
                actual=dtype.group(1),
            )
        shape = _shape_of(value)
        raise violation(
            ShapeError,
            state,
            where,
            f"has shape {shape}, which its annotation {label} rejects: {reason}",
            expected=hint.dim_str,
            actual=shape,
            origin_dims=[name for name in names if name in state.sizes],
        )

    return check
