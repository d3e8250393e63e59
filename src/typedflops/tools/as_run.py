"""Calls counted as they ran: the report's rows for the calls no dry run can cost.

A dry run on ``meta`` tensors cannot cost a body that reads tensor values (``.item()``, an
``if`` on a tensor, a data-dependent op), nor a method whose object a dry run cannot
resize (a LinearOperator held in ``self``). Those calls did run, and
:func:`typedflops.record` counts a call as it runs: :class:`AsRun` records some calls of a
function that way, so that the report gives their FLOPs and bytes at the sizes they ran
at, where it has no formula.

A recorded call runs each of its ops through a dispatch mode, several times a plain op's
overhead, and a real suite calls hundreds of functions thousands of times: so a function
the import hook decorated has its first call recorded (its dry runs come after, when the
test ends), and only one that a dry run could not cost has more, up to
:data:`MEASURED_CALLS` in all. A call recorded inside another recorded one (or inside the user's own
``record()``) is recorded in both. What a call ran is counted when the report asks
(:meth:`AsRun.settle`), outside the test.

The watched function changes class (as ``@typing.no_type_check`` does): the checked call
path of every other function tests nothing for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import disabled_flag
from ..contract.function import CheckedFunction, counting_frame

if TYPE_CHECKING:
    from ..cost.engine.report import Recorder

__all__ = ["MEASURED_CALLS", "AsRun", "Measured"]

#: Calls of one function recorded as they ran, at most (one, until a dry run could not
#: cost it).
MEASURED_CALLS = 8

# What a recorded call gives: the function, the dims it bound (as the report keys them),
# its forward FLOPs, the bytes it read and wrote, and the ops it ran that have no FLOP rule.
Measured = Callable[
    [CheckedFunction[..., Any], tuple[tuple[str, Any], ...], int, int, tuple[str, ...]], None
]
# A recorded call's work (see typedflops.cost.engine.works), counted when asked: counting
# finds a backward's cost by running its ops on meta tensors, which a FlopCounterMode or
# another mode the user holds around the call would see.
_Pending = tuple[CheckedFunction[..., Any], Any]

_MEASURING: dict[type[Any], type[Any]] = {}


def _measuring_class(cls: type[CheckedFunction[Any, Any]]) -> type[Any]:
    """The variant of ``cls`` whose calls its :class:`AsRun` records (``cls``: the class
    it had, which it gets back)."""
    found = _MEASURING.get(cls)
    if found is None:
        plain_call = cls.__call__

        def call_measured(self: CheckedFunction[Any, Any], *args: Any, **kwargs: Any) -> Any:
            watcher: AsRun | None = self.__dict__.get("_as_run")
            frame = counting_frame.get()
            if (
                watcher is None
                or (frame is not None and type(frame) is not tuple)  # a dry run's call
                or disabled_flag.get()
                or self.deferred
            ):
                return plain_call(self, *args, **kwargs)
            return watcher.run(self, plain_call, args, kwargs)

        found = type(
            cls.__name__,
            (cls,),
            {
                "__call__": call_measured,
                "measuring": True,
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
            },
        )
        _MEASURING[cls] = found
    return found


class AsRun:
    """Records the calls of the functions it watches, each up to its limit.

    ``measured(function, binding, flops, bytes, uncounted)`` is told each recorded call that
    returned;
    ``wanted(function)`` says whether a function is worth recording at all (one the report
    has no row for is let go at its first call).
    """

    def __init__(self, measured: Measured, wanted: Callable[[CheckedFunction[..., Any]], bool]):
        self._measured = measured
        self._wanted = wanted
        # Calls of each function seen recorded so far, and how many it may have.
        self.counted: dict[CheckedFunction[..., Any], int] = {}
        self.limit: dict[CheckedFunction[..., Any], int] = {}
        self.pending: list[_Pending] = []

    def watch(self, function: CheckedFunction[..., Any], calls: int = MEASURED_CALLS) -> None:
        """Record ``function``'s next calls, until it has ``calls`` recorded in all."""
        cls = type(function)
        if getattr(cls, "unchecked", False):
            return
        self.limit[function] = limit = max(self.limit.get(function, 0), calls)
        if self.counted.setdefault(function, 0) >= limit or getattr(cls, "measuring", False):
            return
        function.__dict__["_as_run"] = self
        function.__class__ = _measuring_class(cls)

    def unwatch(self, function: CheckedFunction[..., Any]) -> None:
        """Stop recording ``function``'s calls."""
        function.__dict__.pop("_as_run", None)
        cls = type(function)
        if getattr(cls, "measuring", False):
            function.__class__ = cls.__mro__[1]

    def watching(self, function: CheckedFunction[..., Any]) -> bool:
        """Whether ``function``'s calls are being recorded."""
        return bool(getattr(type(function), "measuring", False))

    def stop(self) -> None:
        """Stop recording every function."""
        for function in list(self.counted):
            self.unwatch(function)

    def run(
        self,
        function: CheckedFunction[..., Any],
        call: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Make one call of a watched function inside ``record()``; tell what it ran."""
        if not self._wanted(function):
            self.unwatch(function)
            return call(function, *args, **kwargs)
        from ..cost.engine.report import record

        with record() as recorder:
            result = call(function, *args, **kwargs)
        self.counted[function] = counted = self.counted.get(function, 0) + 1
        if counted >= self.limit.get(function, MEASURED_CALLS):
            self.unwatch(function)
        self._keep(function, recorder)
        return result

    def _keep(self, function: CheckedFunction[..., Any], recorder: Recorder) -> None:
        # (the checks of its arguments may call other checked functions first: a
        # LinearOperator's shape and dtype)
        rows = [row for row in recorder.calls if row.function == function.name]
        if rows:
            self.pending.append((function, rows[-1].work))

    def settle(self) -> None:
        """Count what the calls recorded since the last time ran, and tell it."""
        from ..cost.engine.recorder import counts_of

        pending, self.pending = self.pending, []
        for function, work in pending:
            counts = counts_of(work)
            binding = tuple(work.dims.items())
            moved = counts.read + counts.written
            self._measured(function, binding, counts.forward, moved, tuple(counts.uncounted))
