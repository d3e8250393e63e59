"""The call's dims, seen by jaxtyping's ``isinstance`` and ``print_bindings`` in its body.

jaxtyping answers ``isinstance(y, Float[Tensor, "b d"])`` against the dims of the
innermost ``jaxtyped`` call, kept in its own memo. A ``@typed_flops`` function whose body
calls ``isinstance`` or ``print_bindings`` (read once from its code, nested functions and
comprehensions included) runs with that memo filled from the call's bindings, so such an
assert checks against the call's dims, and dims it binds are the call's afterwards (the
return value is checked with them). Other functions pay nothing for this.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from jaxtyping._storage import get_shape_memo as _get_shape_memo
from jaxtyping._storage import pop_shape_memo, push_shape_memo

from .scope import CallState, call_scope, size_text

__all__ = ["fill_memo", "print_bindings", "reads_memo", "take_back", "with_memo"]

F = TypeVar("F", bound=Callable[..., Any])
Memo = tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]

# (jaxtyping leaves this one unannotated)
get_shape_memo = typing.cast(Callable[[], Memo], _get_shape_memo)

_MEMO_READERS = frozenset({"isinstance", "print_bindings"})


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _code_names(constant)
    return names


def reads_memo(fn: Callable[..., Any]) -> bool:
    """Whether the body of ``fn`` calls ``isinstance`` or ``print_bindings``."""
    code = getattr(fn, "__code__", None)
    return isinstance(code, types.CodeType) and bool(_code_names(code) & _MEMO_READERS)


def fill_memo(memos: tuple[dict[str, Any], ...], state: CallState) -> None:
    """Put the call's bindings in a jaxtyping memo (from ``push_shape_memo``)."""
    single, variadic = memos[0], memos[1]
    for name, size in state.sizes.items():
        if isinstance(size, int):
            single[name] = size
        else:  # jaxtyping keeps a variadic dim with whether it may broadcast
            variadic[name.removeprefix("*")] = (name in state.broadcast_variadic, size)


def take_back(state: CallState, origin: str) -> None:
    """Dims that jaxtyping bound in the current memo become the call's, bound by ``origin``."""
    single, variadic, _, _ = get_shape_memo()
    for name, size in single.items():
        if name not in state.sizes:
            state.bind(name, int(size), origin)
    for name, (broadcastable, shape) in variadic.items():
        key = f"*{name}" if name in single else name
        known = state.sizes.get(key)
        if known is None or (broadcastable and known != tuple(shape)):
            state.bind(key, tuple(int(size) for size in shape), origin)


def with_memo(fn: F) -> F:
    """``fn``, run with jaxtyping's memo holding the dims of the current checked call."""

    @functools.wraps(fn)
    def body(*args: Any, **kwargs: Any) -> Any:
        state = call_scope.get()
        if state is None:
            return fn(*args, **kwargs)
        fill_memo(push_shape_memo(state.arguments or {}), state)
        try:
            result = fn(*args, **kwargs)
            take_back(state, "an isinstance check in the body")
            return result
        finally:
            pop_shape_memo()

    return body  # type: ignore[return-value]


def print_bindings() -> None:
    """Print the dims bound by the innermost ``@typed_flops`` call running, as
    ``jaxtyping.print_bindings`` does for ``jaxtyped`` (a debugging aid; dims in the order
    they were bound). Outside a checked call it prints an empty line.

    >>> import torch
    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> from typedflops import typed_flops
    >>> @typed_flops
    ... def f(x: Float[Tensor, "foo *bar"]) -> None:
    ...     print_bindings()
    >>> f(torch.ones(3, 4, 5))
    The current values for each jaxtyping axis annotation are as follows.
    foo=3
    bar=(4, 5)
    """
    state = call_scope.get()
    if state is None or not state.sizes:
        print("")
        return
    lines = ["The current values for each jaxtyping axis annotation are as follows."]
    lines.extend(f"{name}={size_text(size)}" for name, size in state.sizes.items())
    print("\n".join(lines))
