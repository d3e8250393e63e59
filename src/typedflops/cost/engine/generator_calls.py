"""A decorated generator's (or async generator's) call counted in the records that see
its steps.

The body of a generator runs one step at a time (``next()``, ``send()``, ``throw()``, and
its last one at ``close()``), wherever its consumer advances it. Each step's ops are the
call's own, counted in every record open where the step runs: the first step a record
sees makes the call's :class:`~.works.Call` in it, under the call the consumer was in
(its innermost one in that record); what the consumer runs between steps is the
consumer's. The call ends once, in every record that saw it:

- it returned, or it was closed (a loop left early, ``.close()``, collected): a row of its
  own, with what its steps ran, under its caller (the first of its callers in that record
  that has not returned);
- it raised (an exception its body did not catch, one thrown in, a value that fails its
  annotation): its ops are its caller's, as a decorated function's that raised are;
- its record closed first (the generator paused, or ended on another thread): a row of
  its own at the record's top level, with what ran until then. Steps run after a record
  closed are not that record's (they count in the records open where they run).

Rows made so stand as counts (no formula is fitted: what a generator runs depends on how
far it was advanced, not only on its dims).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import torch

from ...contract import generators
from ...contract.function import CheckedFunction, counting_frame
from ...contract.scope import CallState
from .counter import count_custom_backwards
from .live_records import calls_here, walked
from .recorded_calls import restore_frame
from .recording import lift_naming
from .works import Call, RecordSession, Work, open_caller

__all__ = ["GeneratorCall"]

_frame = counting_frame
_Tensor = torch.Tensor
_thread = threading.get_ident


class GeneratorCall:
    """One call of a decorated generator function: its call in each record that saw a
    step of it (see the module)."""

    __slots__ = ("args", "calls", "closing", "function", "inner", "kwargs", "state")

    def __init__(
        self,
        function: CheckedFunction[Any, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        state: CallState,
    ) -> None:
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self.state = state
        #: Its call in each record that saw a step of it.
        self.calls: dict[RecordSession, Call] = {}
        #: Its calls while a step runs (read by :func:`.live_records.walked`).
        self.inner: tuple[Call, ...] | None = None
        #: Its calls made by its last step, at ``close()``: no row where it ran nothing.
        self.closing: tuple[Call, ...] = ()

    def enter(self, awaits: bool, closing: bool = False) -> Any:
        """A step begins: its ops go to this call in every record open here (``closing``:
        its last step, at ``close()``)."""
        here = calls_here()
        if type(here) is not tuple:
            return None  # (no record here, or a dry run's consumer: the consumer's ops)
        function = self.function
        inner: list[Call] = []
        for outer in here:
            session = outer.session
            call = self.calls.get(session)
            if call is None or call.done:
                call = outer.child(function, session.body(function))
                if call is not outer:  # (else inside a flops= call: part of its body)
                    self.calls[session] = call
                    session.generators[call] = self
                    if closing:
                        self.closing += (call,)
            inner.append(call)
        calls = tuple(inner)
        mode = here[0].session.mode
        naming = None
        if not awaits and mode is not None:
            # (an async step awaits, and other tasks run on this thread meanwhile: torch's
            # modes are the thread's, so they stay)
            naming = lift_naming(mode)
            if mode.sums.waiting:
                mode.sums.settle(boundary=True)  # (what the consumer ran: not the step's)
        token = _frame.set(calls)
        self.inner = calls
        return (token, here, calls, naming, mode, awaits)

    def leave(self, step: Any, item: Any) -> None:
        """The step ended (``item``: what it yielded or returned, or None)."""
        if step is None:
            return
        token, here, calls, naming, mode, awaits = step
        try:
            if not awaits and mode is not None and mode.open:
                if item is not None and (type(item) is not _Tensor or item.grad_fn is not None):
                    count_custom_backwards(item, mode)  # (its Functions' backward: its own)
                if mode.again.regions:
                    mode.again.settle()
                if mode.sums.waiting:
                    mode.sums.settle(boundary=True)
        finally:
            self.inner = None
            restore_frame(token, here, calls)
            if naming is not None and naming.counter.open:
                torch._C._push_on_torch_function_stack(naming)

    def ended(self, raised: bool) -> None:
        """The generator finished: each record of this thread that saw it, and is open,
        takes its call (a row, or its ops to its caller where it ``raised``)."""
        me = _thread()
        for session, call in self.calls.items():
            if call.done or session.closed or session.thread != me:
                continue  # (a record of another thread ends it when it closes)
            session.generators.pop(call, None)
            call.parent = open_caller(call)
            if not call.items and call in self.closing:
                call.done = True  # (closed, paused since another record, running nothing)
                continue
            if raised:
                session.abandon(call)
            else:
                session.finish(call, self.args, self.kwargs, self.state.sizes, fit=False)

    def end_in(self, call: Call, caller: Call) -> None:
        """Its record closes before it finished: a row under ``caller`` with what ran."""
        call.parent = caller
        call.session.finish(call, self.args, self.kwargs, self.state.sizes, fit=False)

    def so_far(self, call: Call) -> Work:
        """What its call ``call`` ran until now, as a work (read while its record is open)."""
        return call.session.work_so_far(call, self.args, self.kwargs, self.state.sizes)


def _inner(names: Mapping[str, Any]) -> Any:
    return getattr(names.get("counter"), "inner", None)


for _code in (
    generators.checked_generator.__code__,
    generators.checked_async_generator.__code__,
    generators._close.__code__,
    generators._aclose.__code__,
):
    walked(_code, _inner)
