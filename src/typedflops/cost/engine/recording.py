"""The counting mode of ``record()``: one per thread, handing each op to the records open in
the current thread or asyncio task.

torch keeps one stack of modes per thread, entered and left in order; records nest, and
asyncio tasks interleave on one thread. So a record pushes no mode of its own: the first
record a thread opens pushes one :class:`RecordingMode` (and the :class:`NamingMode` that
names the user's torch calls outside decorated calls), the last one to close takes them
off, wherever they are on the stack. Which records an op belongs to is read from
:data:`~typedflops.contract.function.counting_frame`, a ContextVar: a tuple holding, for
every record open in this thread or task (outermost first), the innermost decorated call
being counted (see :mod:`.works`), mended where the context was copied earlier (see
:mod:`.live_records`). An op is added to each of them; a thread or task with no record
open passes its ops on untouched.

An op seen before costs a dict lookup: events are kept by what decides them (see
:mod:`.opkeys`). Each call keeps its ops in order with the user call they ran in: an einops
op's group, else inside a decorated call the call site of its body (:mod:`.sites`: its
frame tells, so no torch-function mode runs there and its calls pay only the dispatch
mode), else the torch function the user called (named by :class:`NamingMode`). A call's
``items`` hold, in order: a marker where a user call's ops begin (``(name, pattern)``, a
:class:`~.sites.Site`, or None for ops named each by itself), the events, and the works of
the calls it made.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from ...contract.function import counting_frame
from .backward_ran import ran_in_backward
from .counter import CountingMode, GroupingMode, follow_materialized
from .events import Event, Group
from .events import _group as _current_group
from .fast_path import hold_fast_path, release_fast_path
from .functions import inside_rule
from .kernels import _meta_target as _target
from .kernels import meta_target, runs_otherwise
from .key_guards import guarded_event, usual_key
from .live_records import calls_here as _calls
from .live_records import open_here, thread_state
from .opkeys import (
    PLANS,
    Plan,
    find_event,
    forget_events,
    op_key,
    plan_of,
    tensor_key,
    view_key,
)
from .placing import OWN_ROW as _OWN_ROW
from .placing import ROOT_LIMIT, START, add_event
from .placing import Sink as _Sink
from .placing import in_torch_call as _in_torch_call
from .placing import in_user_call as _in_user_call
from .placing import let_go_elsewhere as _let_go_elsewhere
from .placing import place as _place
from .placing import place_in as _place_in
from .placing import places as _places
from .placing import realm as _realm
from .placing import where as _where
from .rules import function_rules
from .run_again import region_frame
from .sites import find_site
from .skip_dynamo import keep_dynamo_out
from .waits import Place

__all__ = [
    "ROOT_LIMIT",
    "START",
    "NamingMode",
    "RecordingMode",
    "add_event",
    "current_mode",
    "entered",
    "launched_from",
    "left",
    "lift_naming",
    "thread_mode",
]

_Tensor = torch.Tensor
_live = thread_state()
_autograd_node = torch._C._current_autograd_node
_frame = counting_frame
_PLAIN = (torch.Tensor,)
_Group = Group
_function_depth = torch._C._len_torch_function_stack
_function_at = torch._C._get_function_stack_at
_getframe = sys._getframe
_grad = torch._C.is_grad_enabled
_forward_ad = torch._C._is_fwd_grad_enabled
_inference = torch._C.is_inference_mode_enabled
_saved_hooks = torch._C._autograd._top_saved_tensors_default_hooks
_in_tls = torch._C._is_key_in_tls
_get_tls = torch._C._get_obj_in_tls


class RecordingMode(CountingMode):  # type: ignore[no-untyped-call]
    """The dispatch mode of one thread while a record is open in it (see the module)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # (see CountingMode's)
        return False

    def __init__(self) -> None:
        super().__init__(_Sink())
        self.sums.shared = True
        self.sums.where = _where
        self.sums.place = _place_in
        self.sums.realm = _realm
        self.sums.inside = _in_user_call
        self.sums.internal = _in_torch_call
        self.sums.elsewhere = _let_go_elsewhere
        self.naming = NamingMode(self)
        self.grouping = self.naming
        self.watch: Any = None
        #: Whether its thread's records are open (its modes on torch's stacks).
        self.open = False
        #: Its thread's modes (see :func:`entered`).
        self.modes: _Modes | None = None

    def places(self, event: Event) -> list[Place] | None:
        return _places(event)

    def custom_backward(self, node: Any) -> None:
        sink, self.sink = self.sink, _OWN_ROW
        try:
            super().custom_backward(node)
        finally:
            self.sink = sink

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        plan = PLANS.get(id(func)) or plan_of(func)
        calls = _frame.get()
        if (
            calls is _live.full
            and plan.quick == len(args)
            and not kwargs
            and not types
            and not self.paused
            and not (self.watch and inside_rule())
            and _autograd_node() is None
            and _saved_hooks(False) is None
        ):
            # the usual op (mm, relu, add of plain tensors, in this thread's records, no
            # checkpoint or backward running): found again by its tensors' guard
            if plan.direct is None or not args[0].is_meta:
                out = plan.fast(*args)
            else:
                out = plan.run(*args)  # (see .opkeys.Plan)
            grad = _grad()
            hooked = False
            same = len(args) == 2 and args[0] is args[1]
            for guard, was, alias, found in plan.guarded:
                if was is grad and alias is same and guard.check(*args):
                    event = found
                    break
            else:
                event = guarded_event(plan, func, args, grad, out)
        else:
            if plan.metadata:
                return NotImplemented  # as FlopCounterMode: a subclass (a nested tensor) answers
            if calls is not _live.full:
                calls = open_here(calls)
            if type(calls) is not tuple or self.paused:
                # (paused too where its records closed on another thread: the mode waits on
                # this thread's stacks to be taken off, see :func:`left`)
                if not self.paused and type(calls := launched_from()) is tuple:
                    node = _autograd_node()  # (a device thread of autograd's engine)
                    if node is not None:
                        return ran_in_backward(node, calls, func, args, kwargs or {})
                return func(*args, **kwargs) if kwargs else func(*args)  # nothing recorded here
            node = _autograd_node()
            if node is not None:  # autograd's engine: a backward pass that runs
                return ran_in_backward(node, calls, func, args, kwargs or {})
            if (types and types != _PLAIN) or not plan.keep or (self.watch and inside_rule()):
                # a tensor subclass, an op without a rule or with the user's: the counting
                # mode's own path
                return CountingMode.__torch_dispatch__(self, func, types, args, kwargs)
            out, event, grad, hooked = _keyed(plan, func, args, kwargs)
        call = calls[0]
        sites = call.sites
        if sites is not None and len(calls) == 1 and _current_group.get() is None:
            # (one record, in a decorated call's body, made there or one frame below: an
            # operator's, Tensor.__matmul__)
            frame: FrameType | None = _getframe(1)
            code = call.code
            if frame.f_code is not code:  # type: ignore[union-attr]
                frame = frame.f_back  # type: ignore[union-attr]
            if frame is not None and frame.f_code is code:
                site = sites.get(frame.f_lasti) or find_site(code, sites)
            else:
                site = find_site(code, sites)
            items = call.items
            if site is not call.label:
                call.label = site
                items.append(site)
            items.append(event)
        else:
            _place(calls, event)
        again = self.again
        if hooked or again.regions:
            again.op(event, region_frame())
        if (
            event.needs_grad
            or plan.writes
            or self.sums.waiting
            or self.function is not None
            or not (grad or _forward_ad() or _inference())
        ):
            # (an op with autograd and forward AD off, outside inference mode, may run
            # inside a torch.autograd.Function's forward, whose edges go to its inputs,
            # leaves too: see .function_inputs)
            self.edges(event, func, args, kwargs or {}, out)
        return out


def _keyed(
    plan: Plan, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None
) -> tuple[Any, Event, bool, bool]:
    """Run an op off the usual path, as its plan says: its output, its event (found by its
    key, else made), the grad mode and whether saved-tensor hooks are on."""
    count = len(args)
    if plan.direct is not None and args and args[0].is_meta:
        run = plan.run  # (RUNS' function: on meta it refuses what the device refuses)
    elif count == plan.arity and not kwargs:
        run = plan.fast  # (torch's generated binding, see .fast_calls)
    else:
        run = plan.run if plan.direct is None or not args else plan.direct
    out = run(*args, **kwargs) if kwargs else run(*args)
    grad = _grad()
    hooked = _saved_hooks(False) is not None
    if plan.clone:
        follow_materialized(args[0], out)
    if kwargs:
        key = op_key(plan, args, kwargs, out)
    elif plan.view:
        key = view_key(plan, args) or op_key(plan, args, None, out)
    elif plan.tensors and (count == 1 or count == 2):
        # (relu, mm, add off the usual path: keyed as tensor_key keys them)
        key = usual_key(plan, args, grad, out)
        if hooked and key is not None and key[1]:
            key = tensor_key(plan, args, out)
    elif plan.tensors:
        key = tensor_key(plan, args, out)
    else:
        key = op_key(plan, args, None, out)
    return out, find_event(key, func, plan, args, kwargs, out)[1], grad, hooked


def launched_from() -> Any:
    """The records open where the backward pass running here began: autograd's engine runs
    a GPU's backward ops on a thread of its own, handing it a copy of that context."""
    if _in_tls("context"):
        context = _get_tls("context")
        if context is not None:
            return context.get(_frame)
    return None


_TENSOR_BACKWARD = torch.Tensor.backward
_BACKWARD = torch.autograd.backward
_GRAD = torch.autograd.grad


class NamingMode(GroupingMode):
    """Names each top-level torch call the user made outside decorated calls (``matmul``,
    ``softmax``): the ops it runs form one row of a breakdown. On ``meta`` tensors inside
    :func:`~.kernels.kernels_of`, attention and RMS norm run the kernels that device would
    pick, as in a dry run, and so do recurrent layers, so that a record on meta and an
    estimate count alike."""

    counter: RecordingMode

    def name(self, func: Any) -> str | None:
        calls = _calls()
        if type(calls) is not tuple or calls[-1].function is not None:
            return None  # nothing recorded, or inside a decorated call (named by sites)
        if func is _TENSOR_BACKWARD or func is _BACKWARD or func is _GRAD:
            # a backward begins here, from what the block holds: decided now, as the
            # engine's first op would (a GPU runs them on a thread of its own, which a
            # record of torch 2.11 does not see)
            self.counter.sums.settle(started=True)
        return super().name(func)

    def target(self, func: Any, args: tuple[Any, ...], name: str | None) -> str | None:
        if runs_otherwise(func) and type(_calls()) is tuple:
            first = args[0] if args else None
            if isinstance(first, _Tensor) and first.is_meta:
                return meta_target()
        return None


# -- one mode per thread -------------------------------------------------------------------


class _Modes:
    """One thread's recording mode and how many of its records are open. Kept apart from
    the thread-local state so that a record closed on another thread (a generator holding
    the block, closed or collected there) counts down its own thread's records."""

    __slots__ = ("depth", "mode", "stale", "thread")

    def __init__(self) -> None:
        self.mode: RecordingMode | None = None
        self.depth = 0
        #: A mode whose last record closed on another thread: still on this thread's
        #: stacks (only this thread can take it off), passing every op on untouched.
        self.stale: RecordingMode | None = None
        self.thread = threading.get_ident()


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.modes = _Modes()


_state = _ThreadState()


def thread_mode() -> RecordingMode | None:
    """The recording mode of this thread, while a record is open in it."""
    return _state.modes.mode


def current_mode() -> CountingMode | None:
    """The mode counting the ops run here: this thread's recording mode inside a record,
    a dry run's own inside it, or None."""
    frame = _calls()
    if type(frame) is tuple:
        return _state.modes.mode
    return getattr(getattr(frame, "session", None), "mode", None)


def lift_naming(mode: RecordingMode) -> NamingMode | None:
    """Take a thread's naming mode off torch's function-mode stack, where it is on top, for
    a decorated call's body (whose ops are named by their call sites); not while a record
    on meta costs another device's kernels (the naming mode picks them). The mode taken
    off, to push back when the call returns (while its record is open)."""
    depth = _function_depth()
    if not depth or _function_at(depth - 1) is not mode.naming or _target.get() is not None:
        return None
    return torch._C._pop_torch_function_stack()  # type: ignore[no-any-return]


def entered() -> RecordingMode:
    """A record opened in this thread: push the thread's modes if it is the first (after
    taking off a mode whose records closed on another thread). The thread's mode."""
    state = _state.modes
    if state.stale is not None:
        stale, state.stale = state.stale, None
        _take_off(stale)
    state.depth += 1
    if state.depth > 1 and state.mode is not None:
        return state.mode
    forget_events()
    hold_fast_path()
    keep_dynamo_out(RecordingMode)
    mode = RecordingMode()
    mode.__enter__()  # type: ignore[no-untyped-call]
    mode.naming.__enter__()  # type: ignore[no-untyped-call]
    mode.open = True
    mode.modes = state
    state.mode = mode
    watched = function_rules()
    if watched:
        mode.watch = _install_watch(watched)
    return mode


def left(mode: RecordingMode) -> None:
    """A record closed: take its thread's modes off after the thread's last one, wherever
    they are on torch's stacks (an asyncio task may close its record while another task's
    mode is above it). Closed on another thread (a generator holding the block, closed or
    collected there), the records are counted down on their own thread, whose modes stop
    counting at once and are taken off its stacks by the next record it opens (torch's
    stacks are each thread's own)."""
    state = mode.modes
    if state is None or state.mode is not mode:
        return
    state.depth -= 1
    if state.depth > 0:
        return
    state.mode = None
    mode.open = False
    release_fast_path()
    if threading.get_ident() != state.thread:
        mode.paused = True  # (every op passed on, from now, as its own thread runs them)
        state.stale = mode
        return
    _take_off(mode)


def _take_off(mode: RecordingMode) -> None:
    """Take this thread's ``mode`` (and its naming mode) off torch's stacks."""
    if mode.watch is not None:
        sys.setprofile(mode.watch.previous)
    _remove(
        mode.naming,
        torch._C._len_torch_function_stack,
        torch._C._get_function_stack_at,
        torch._C._pop_torch_function_stack,
        torch._C._push_on_torch_function_stack,
    )
    _remove(
        mode,
        torch._C._len_torch_dispatch_stack,
        torch._C._get_dispatch_stack_at,
        lambda: torch._C._pop_torch_dispatch_stack(None),
        torch._C._push_on_torch_dispatch_stack,
    )


def _remove(
    mode: Any,
    length: Callable[[], int],
    at: Callable[[int], Any],
    pop: Callable[[], Any],
    push: Callable[[Any], None],
) -> None:
    """Exit ``mode``, first lifting the modes entered above it (put back after)."""
    above: list[Any] = []
    while length() and at(length() - 1) is not mode:
        above.append(pop())
    try:
        if length():
            mode.__exit__(None, None, None)
    finally:
        for other in reversed(above):
            push(other)


def _install_watch(watched: dict[Any, Any]) -> Any:
    from .functions import _Watch

    watch = _Watch(_Sink(), watched)
    sys.setprofile(watch)
    return watch
