"""A decorated call counted in every record open here (the record side of the contract's
hook, :mod:`.hook`): checked, run into each record's frame, closed into a work of its caller
(see :mod:`.works`); and a coroutine's call, and a benchmark's measured call, likewise.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from ...contract import recall
from ...contract.function import CheckedFunction, counting_frame, notify_observers
from ...contract.function import _observers as _observed
from ...contract.scope import call_scope
from ...errors import ContractError, SpecError
from ..types import Cost
from .counter import count_custom_backwards
from .declared import check_declared
from .fit import Size
from .frames import no_frame
from .kernels import _meta_target as _target
from .live_records import forget_full, open_here, thread_state, walked
from .recording import lift_naming
from .works import Call

__all__ = ["AwaitedCall", "count_recorded_call", "note_measured", "restore_frame"]

_frame = counting_frame
_no_torch_function = torch._C.DisableTorchFunction
_function_modes = torch._C._len_torch_function_stack
_function_at = torch._C._get_function_stack_at
_pop_function = torch._C._pop_torch_function_stack
_push_function = torch._C._push_on_torch_function_stack
_live = thread_state()
_autograd_node = torch._C._current_autograd_node
_Tensor = torch.Tensor
# As a checked call does (see typedflops.contract.function): past this depth of nested
# calls, the frames a recorded call adds (the checked call and this module's) are added to
# the recursion limit while it runs.
_SHALLOW = 8
_OWN_FRAMES = 4


def count_recorded_call(
    calls: tuple[Call, ...],
    function: CheckedFunction[Any, Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Any:
    """Check, run and count one call in every record open here (``calls``: the innermost
    call of each). Its body runs with the record's naming mode off torch's stack (its ops
    are named by their call sites); typedflops' own work (checks, bookkeeping) sees no
    torch-function mode."""
    if calls is not _live.full or len(calls) != 1:
        return _count_in_records(calls, function, args, kwargs)
    # the usual call (one record open here, its frame found whole, a body that returns at
    # once with no flops= of its own or around it), as below with nothing else to decide
    outer = calls[0]
    session = outer.session
    mode = session.mode
    body = session.bodies.get(function)
    if (
        mode is None
        or body is None
        or not body.simple
        or outer.declared
        or _autograd_node() is not None
    ):
        return _count_in_records(calls, function, args, kwargs)
    depth = _function_modes()
    naming = None
    if depth and _function_at(depth - 1) is mode.naming and _target.get() is None:
        naming = _pop_function()  # (see .recording.lift_naming)
        depth -= 1
    try:
        # (CheckedFunction.recall_arguments and recall_return, inlined: the hot path)
        contract = function._contract or function.contract
        try:
            if depth:
                with _no_torch_function():
                    state, outcome = recall.check_arguments(contract, function.name, args, kwargs)
            else:
                state, outcome = recall.check_arguments(contract, function.name, args, kwargs)
        except ContractError as exc:
            raise exc.with_traceback(None) from None
        inner = Call(session, outer, function, body)
        parent = call_scope.get()
        if outcome is not None and (parent is not None or body.binds):
            state = outcome.own_state()  # (the recalled one is shared)
        if parent is not None:
            state.depth = parent.depth + 1
        deep = state.depth > _SHALLOW
        if deep:
            sys.setrecursionlimit(sys.getrecursionlimit() + _OWN_FRAMES)
        sums = mode.sums
        if sums.waiting:
            sums.settle(boundary=True)
        own = (inner,)
        frame_token = _frame.set(own)
        _live.full = own
        scope_token = call_scope.set(state)
        try:
            result = body.run(*args, **kwargs) if kwargs else body.run(*args)
            if type(result) is not _Tensor or result.grad_fn is not None:
                count_custom_backwards(result, mode)
            if mode.again.regions:
                mode.again.settle()
            if sums.waiting:
                sums.settle(boundary=True)
        except BaseException:
            _abandon(own, calls)
            raise
        finally:
            try:  # noqa: SIM105 (a context manager costs more, here on each call)
                call_scope.reset(scope_token)
            except LookupError:
                pass
            restore_frame(frame_token, calls, own)
            if deep:
                sys.setrecursionlimit(sys.getrecursionlimit() - _OWN_FRAMES)
        try:
            if depth:
                with _no_torch_function():
                    state = recall.check_return(contract, result, state, outcome)
            else:
                state = recall.check_return(contract, result, state, outcome)
        except ContractError as exc:
            _abandon(own, calls)
            raise exc.with_traceback(None) from None
        except BaseException:
            _abandon(own, calls)
            raise
        session.finish(inner, args, kwargs, state.sizes, False)
        if _live.registry.depth == 1 and not outer.done and not session.closed:
            _live.full = calls
        else:
            forget_full()
    finally:
        if naming is not None and naming.counter.open:
            _push_function(naming)
    if _observed:
        notify_observers(function, args, kwargs, state)
    return result


def _count_in_records(
    calls: tuple[Call, ...],
    function: CheckedFunction[Any, Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Any:
    """:func:`count_recorded_call` in full: records nested or copied into this context,
    bodies that run later, ``flops=`` calls, calls autograd's engine makes."""
    if calls is not _live.full:
        # (a context copied earlier, or given to another thread as asyncio.to_thread does:
        # the records open here, each in its innermost call open, see .live_records)
        calls = open_here(calls)
        if type(calls) is not tuple:
            with no_frame():
                return function(*args, **kwargs)
    # (every record open here, in calls not returned: so is the body's own, and the
    # caller's again once it returned, unless a record opened or closed in between)
    full = calls is _live.full
    session = calls[0].session
    mode = session.mode
    naming = lift_naming(mode) if mode is not None else None
    others = _function_modes()  # (the user's: not over typedflops' own work)
    try:
        if others:
            with _no_torch_function():
                state, outcome = function.recall_arguments(args, kwargs)
        else:
            state, outcome = function.recall_arguments(args, kwargs)
        body = session.bodies.get(function) or session.body(function)
        if body.deferred:
            return function.call_deferred(args, kwargs, state)
        if _autograd_node() is not None:
            # run by autograd's engine (a checkpointed region's forward run again): its
            # ops are the backward's (see .backward_ran), not a call of its own
            result = body.run(*args, **kwargs) if kwargs else body.run(*args)
            function.recall_return(result, state, outcome)
            return result
        if len(calls) == 1:
            outer = calls[0]
            inner: tuple[Call, ...] = (
                outer if outer.declared else Call(session, outer, function, body),
            )
        else:
            inner = tuple(call.child(function, body) for call in calls)
        if body.declared and any(c is not o for c, o in zip(inner, calls, strict=True)):
            # (its own count, not inside a flops= call's: checked before its work)
            try:
                check_declared(function, args, kwargs, state.sizes)
            except SpecError:
                _abandon(inner, calls)
                raise
        parent = call_scope.get()
        if outcome is not None and (parent is not None or body.binds):
            state = outcome.own_state()  # (the recalled one is shared)
        if parent is not None:
            state.depth = parent.depth + 1
        deep = state.depth > _SHALLOW  # recursion: the frames it adds do not count
        if deep:
            sys.setrecursionlimit(sys.getrecursionlimit() + _OWN_FRAMES)
        if mode is not None and mode.sums.waiting:
            mode.sums.settle(boundary=True)  # (what made its arguments: outside it, see .fan_in)
        frame_token = _frame.set(inner)
        if full:
            _live.full = inner
        scope_token = call_scope.set(state)
        try:
            result = body.run(*args, **kwargs) if kwargs else body.run(*args)
            # the backward of the autograd Functions it returns is its own, and so are
            # the ops of its checkpointed regions that run again, and the gradient sums of
            # the edges its ops made
            if type(result) is not _Tensor or result.grad_fn is not None:
                count_custom_backwards(result, mode)  # (not for a tensor no graph made)
            if mode is not None and mode.again.regions:
                mode.again.settle()
            if mode is not None and mode.sums.waiting:
                mode.sums.settle(boundary=True)
        except BaseException:
            _abandon(inner, calls)
            raise
        finally:
            try:  # noqa: SIM105 (a context manager costs more, here on each call)
                call_scope.reset(scope_token)
            except LookupError:  # (gone already: see contract.scope.call_scope)
                pass
            restore_frame(frame_token, calls, inner)
            if deep:
                sys.setrecursionlimit(sys.getrecursionlimit() - _OWN_FRAMES)
        # its return value checked (a call whose value fails gave its ops to its caller)
        try:
            if others:
                with _no_torch_function():
                    state = function.recall_return(result, state, outcome)
            else:
                state = function.recall_return(result, state, outcome)
        except BaseException:
            _abandon(inner, calls)
            raise
        for index, call in enumerate(inner):
            if call is not calls[index]:  # (else inside a flops= call: part of its body)
                call.session.finish(call, args, kwargs, state.sizes)
        if full and len(calls) == _live.registry.depth:
            for call in calls:
                if call.done or call.session.closed:
                    break
            else:
                _live.full = calls
    finally:
        if naming is not None and naming.counter.open:
            _push_function(naming)  # (see .recording.lift_naming)
    if _observed:
        notify_observers(function, args, kwargs, state)
    return result


walked(count_recorded_call.__code__, lambda names: names.get("own"))
walked(_count_in_records.__code__, lambda names: names.get("inner"))


def restore_frame(token: Any, calls: tuple[Call, ...], inner: tuple[Call, ...]) -> None:
    """Give back the records' frame a call's body found. Records that closed in the body
    leave it; those that opened there and are still open stay (their roots)."""
    current = _frame.get()
    try:  # noqa: SIM105 (a context manager costs more, here on each call)
        _frame.reset(token)
    except LookupError:  # (gone already: see contract.scope.call_scope)
        pass
    if current is inner:
        return  # (the usual)
    sessions = {call.session for call in inner}
    opened = (
        tuple(c for c in current if c.session not in sessions) if type(current) is tuple else ()
    )
    kept = tuple(call for call in calls if not call.session.closed)
    if opened or len(kept) != len(calls):
        _frame.set((*kept, *opened) or None)


def _abandon(inner: tuple[Call, ...], calls: tuple[Call, ...]) -> None:
    for call, outer in zip(inner, calls, strict=True):
        if call is not outer:
            call.session.abandon(call)


class AwaitedCall:
    """A decorated coroutine's call in every record open here (``calls``: the innermost
    call of each), while its body is awaited in :meth:`scope`."""

    __slots__ = ("args", "calls", "inner", "kwargs")

    def __init__(
        self,
        calls: tuple[Call, ...],
        function: CheckedFunction[Any, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> None:
        self.calls = calls
        self.inner = tuple(call.child(function, call.session.body(function)) for call in calls)
        self.args = args
        self.kwargs = kwargs

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Its ops and calls go to it inside the block (to its callers if it raises)."""
        token = _frame.set(self.inner)
        try:
            yield
        except BaseException:
            _abandon(self.inner, self.calls)
            raise
        finally:
            restore_frame(token, self.calls, self.inner)

    def finish(self, bound: Mapping[str, Size]) -> None:
        """Close it after its body returned and its arguments passed (``bound``: its dims)."""
        for call, outer in zip(self.inner, self.calls, strict=True):
            if call is not outer:
                call.session.finish(call, self.args, self.kwargs, bound)


def note_measured(name: str, cost: Cost, measurement: Any) -> None:
    """A benchmarked call: a row in every record open here, with its measurement."""
    calls = _frame.get()
    if type(calls) is tuple:
        for call in calls:
            call.session.add_measured(name, cost, measurement, call)
