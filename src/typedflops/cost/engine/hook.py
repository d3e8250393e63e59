"""The engine's side of the contract's one hook: a checked call made while a session counts.

A checked function looks at :data:`~typedflops.contract.function.counting_frame` on every
call; when a ``record()`` block or a dry run has set it, the call is handed to the counter
attached here, which checks it, runs it into its frame (or, in a dry run, stands in for a
block whose cost is known) and closes it. In a record the variable holds a tuple (the
innermost call of each record open here, see :mod:`.recorder`); in a dry run, its frame.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any

import torch

from ...contract.function import CheckedFunction, attach_counter, notify_observers
from ...contract.scope import CallState, call_scope
from .calls import CallHandle, begin_call
from .counter import count_custom_backwards
from .frames import Frame
from .generator_calls import GeneratorCall
from .live_records import open_here, walked
from .recorded_calls import AwaitedCall, count_recorded_call
from .session import RunSession

__all__ = ["Counter"]


class Counter:
    """Counts the checked calls made inside a session (see :mod:`typedflops.contract.function`)."""

    record_call = staticmethod(count_recorded_call)

    def count_call(
        self,
        frame: Frame | tuple[Any, ...],
        function: CheckedFunction[Any, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        """Check, run and count one call: typedflops' own work (checks, bookkeeping) runs
        with the torch-function modes off, so that only the body's ops are seen."""
        if type(frame) is tuple:
            return count_recorded_call(frame, function, args, kwargs)
        assert isinstance(frame, Frame)
        mode = frame.session.mode
        checked = args, kwargs
        if mode is not None and mode.to_meta:
            # (a real tensor passed in a dry run, a global weight: its meta copy, as its
            # ops take it; the checks see a CPU scalar's too, so one device, as in a run)
            args, kwargs = mode.on_meta(args), mode.on_meta(kwargs)
            checked = mode.on_meta(args, True), mode.on_meta(kwargs, True)
        with torch._C.DisableTorchFunction():
            state = function.check_arguments(*checked)
            if function.deferred:
                return function.call_deferred(args, kwargs, state)
            handle = begin_call(frame, function, args, kwargs)
        token = call_scope.set(state)
        try:
            with handle.scope():
                if handle.shortcut is None:
                    result = count_custom_backwards(function.body(*args, **kwargs))
                    if mode is not None and mode.again.regions:
                        mode.again.settle()  # (its checkpointed regions' ops run again)
                else:
                    result = handle.stand_in(args, kwargs)
            # (a real tensor it returns is checked as its meta copy, likewise)
            returned = mode.on_meta(result, True) if mode is not None else result
            with torch._C.DisableTorchFunction():
                function.check_return(returned, state)
                handle.finish(state.sizes, result)
        finally:
            try:  # noqa: SIM105 (a context manager costs more, here on each call)
                call_scope.reset(token)
            except LookupError:  # (gone already: see contract.scope.call_scope)
                pass
        notify_observers(function, args, kwargs, state)
        return result

    async def count_coroutine(
        self,
        frame: Frame | tuple[Any, ...],
        function: CheckedFunction[Any, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        state: CallState,
        coroutine: Coroutine[Any, Any, Any],
    ) -> Any:
        """Await a decorated coroutine's body as one counted call."""
        handle: CallHandle | AwaitedCall
        if type(frame) is tuple:
            here = open_here(frame)
            if type(here) is not tuple:
                return await coroutine  # (no record of this thread or task)
            handle = AwaitedCall(here, function, args, kwargs)
        else:
            assert isinstance(frame, Frame)
            handle = begin_call(frame, function, args, kwargs, cached=False)
        with handle.scope():
            result = await coroutine
        handle.finish(state.sizes)
        return result

    def count_generator(
        self,
        function: CheckedFunction[Any, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        state: CallState,
    ) -> GeneratorCall:
        """The count of a decorated generator's call (see :mod:`.generator_calls`)."""
        return GeneratorCall(function, args, kwargs, state)

    def frame_here(self) -> Any:
        """The records counting a call made here, where the context holds none (see
        :mod:`.live_records`)."""
        return open_here(None)

    def observes(self, frame: Frame | tuple[Any, ...]) -> bool:
        """Calls a dry run makes are typedflops' own, not the user's."""
        return isinstance(frame, tuple) or not isinstance(frame.session, RunSession)


walked(Counter.count_coroutine.__code__, lambda names: getattr(names.get("handle"), "inner", None))
attach_counter(Counter())
