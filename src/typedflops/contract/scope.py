"""The scope of one checked call: the dims it bound, where each was bound, its device.

A :class:`CallState` is made per call of a ``@typed_flops`` function; wrapped ops look the
innermost one up (:func:`current_call`) to check their axes against it.
Messages about a violation are built here, with the bindings that explain them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

import torch

from ..errors import ContractError
from ..syntax.expr import Expression
from ..text import shape_text

E = TypeVar("E", bound=ContractError)

__all__ = [
    "CallState",
    "Origin",
    "Size",
    "bind_module_dims",
    "current_call",
    "display_name",
    "is_compiling",
    "module_dims",
    "shape_text",
    "size_text",
    "violation",
]

Origin = tuple[str, tuple[int, ...], int]  # (where, shape, axis) that bound a dim
Size = int | tuple[int, ...]  # a named dim's size, or a variadic dim's sizes
Pending = tuple[Expression, str, int, int, str, tuple[int, ...]]


_NO_NAMES: frozenset[str] = frozenset()


class CallState:
    """The dims bound by one call, where each was bound, and the call's device.

    Wrapped ops look the enclosing call's state up to check their axes against it.
    """

    # The attributes every call sets are slots; the rarely set ones keep a class default
    # (read through the instance) and go to its __dict__ when set: a call's state is
    # made on every checked call.
    __slots__ = ("__dict__", "device", "device_where", "function", "origins", "sizes")

    #: Symbolic axes wait until every argument has bound its dims:
    #: (expression, dim string, axis, size, where, shape).
    pending: tuple[Pending, ...] = ()
    #: Variadic dims last bound by a broadcastable ``#*name`` (jaxtyping's rule: such a
    #: binding may still grow by broadcasting against a later argument).
    broadcast_variadic: frozenset[str] = _NO_NAMES
    #: The call's arguments by name, when ``{name}`` dims need them.
    arguments: dict[str, Any] | None = None
    #: How many checked calls enclose this one in its thread or task.
    depth: int = 0

    def __init__(
        self,
        function: str,
        sizes: dict[str, Size] | None = None,
        origins: dict[str, Origin | str] | None = None,
    ) -> None:
        self.function = function
        self.sizes: dict[str, Size] = {} if sizes is None else sizes
        self.origins: dict[str, Origin | str] = {} if origins is None else origins
        self.device: torch.device | None = None
        self.device_where = ""

    def copy(self) -> CallState:
        """A state with the same bindings and device, to try a value against."""
        trial = CallState(self.function)
        trial.sizes = dict(self.sizes)
        trial.origins = dict(self.origins)
        trial.device, trial.device_where = self.device, self.device_where
        trial.broadcast_variadic = self.broadcast_variadic
        trial.arguments = self.arguments
        return trial

    def adopt(self, trial: CallState) -> None:
        """Keep what a trial state (from :meth:`copy`) bound."""
        self.sizes, self.origins = trial.sizes, trial.origins
        self.device, self.device_where = trial.device, trial.device_where
        self.broadcast_variadic = trial.broadcast_variadic
        self.pending += trial.pending

    def bind(self, name: str, size: Size, origin: Origin | str) -> None:
        """Bind ``name`` before any argument is seen (e.g. from a module's own sizes)."""
        if type(self.sizes) is not dict:
            self.own_bindings()
        self.sizes[name] = size
        self.origins[name] = origin

    def own_bindings(self) -> None:
        """Take dicts of its own before binding more: a call that recalled an earlier
        call's outcome (see :mod:`.recall`) holds that outcome's, which never change."""
        self.sizes, self.origins = dict(self.sizes), dict(self.origins)

    def bound_so_far(self) -> str:
        """``batch=8, d_in=784``: the bindings, for the last line of an error."""
        return ", ".join(f"{name}={size_text(size)}" for name, size in self.sizes.items())

    def origin_line(self, name: str) -> str:
        """Where ``name`` was bound, in words, or an empty string if it is not bound."""
        origin = self.origins.get(name)
        if origin is None:
            return ""
        size = size_text(self.sizes[name])
        if isinstance(origin, str):
            return f"{name}={size} was bound by {origin}"
        where, shape, axis = origin
        return f"{name}={size} was bound by {where} (shape {shape_text(shape)}, axis {axis})"


def module_dims(obj: Any) -> Mapping[str, int]:
    """A module's own sizes (``typedflops_dims()``), or none."""
    dims = getattr(obj, "typedflops_dims", None)
    return dims() if callable(dims) else {}


def bind_module_dims(obj: Any, state: CallState) -> None:
    """A module's own sizes are part of its forward's contract, bound before the arguments."""
    for name, size in module_dims(obj).items():
        state.bind(name, size, f"module {type(obj).__name__}")


#: Whether dynamo is tracing: it folds this to True; eagerly it is a plain ``return False``
#: (25 ns, where ``torch.compiler.is_compiling`` asks TorchScript first).
is_compiling: Callable[[], bool] = getattr(
    torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling
)

# The innermost checked call of this thread or asyncio task (a ContextVar: tasks and threads
# each see their own). Its resets, and those of the cost engine's variables, let a
# LookupError go: the variable gone where the reset would delete it is the state the reset
# leaves (a generator abandoned while it held a value, closed by the garbage collector
# inside another block, is one way to end there).
call_scope: ContextVar[CallState | None] = ContextVar("typedflops_call", default=None)


def current_call() -> CallState | None:
    """The bound dims of the innermost ``@typed_flops`` call running, or None outside one."""
    return call_scope.get()


# Messages are built with f-strings only (no str() of a size): torch.compile traces them
# when a compiled call breaks the contract, with sizes that may be symbolic.


def size_text(size: Size) -> str:
    return f"{size}" if isinstance(size, int) else shape_text(size)


def display_name(fn: Callable[..., Any]) -> str:
    """The name used in messages: the qualified name without ``<locals>`` noise."""
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    return str(qualname).rsplit("<locals>.", 1)[-1]


def violation(
    cls: type[E],
    state: CallState,
    where: str,
    reason: str,
    *,
    dim: str | None = None,
    expected: Any = None,
    actual: Any = None,
    origin_dims: Sequence[str] = (),
    argument: str | None = None,
) -> E:
    lines = [f"{state.function}(): {where} {reason}"]
    lines.extend(line for name in origin_dims if (line := state.origin_line(name)))
    if state.sizes:
        lines.append(f"bound so far: {state.bound_so_far()}")
    if argument is None:
        if where.startswith("arg"):
            argument = where.removeprefix("argument ").strip("'")
        else:
            argument = "yield" if where.startswith("the yielded") else "return"
    return cls(
        "\n  ".join(lines),
        function=state.function,
        argument=argument,
        dim=dim,
        expected=expected,
        actual=actual,
        bindings=state.sizes,
    )
