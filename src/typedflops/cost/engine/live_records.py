"""Which records an op or a decorated call run here is counted in.

:data:`~typedflops.contract.function.counting_frame` (a ContextVar) holds, for each record
open where it was set, the innermost decorated call being counted. A context copied
earlier (``contextvars.copy_context()`` run later, a callback or task given an older
context) holds what was open when it was copied: records opened since are missing from
it, and it may name calls that have returned or records that have closed. So each record
is also kept here, per thread, under the asyncio task that opened it (None outside any
task), and the records an op is counted in are:

- the records of the variable's tuple that are open, on this thread (a context copied to
  another thread holds records that are not its own), each in its innermost call that has
  not returned (a task started inside a call that has returned runs in its caller);
- every record opened here outside any task (its block holds all this thread runs until
  it closes: an event loop run inside it, tasks given older contexts);
- every record the current task opened, in the innermost of its calls open on this
  thread's Python stack (else its root).

A task that opened no record and inherited none counts in no task's record: asyncio tasks
interleaving on one thread do not count into each other's records.

The usual tuple (every record open on the thread, none closed, no call returned) is kept
as the thread's ``full`` one: an op that finds it costs one comparison.
"""

from __future__ import annotations

import itertools
import sys
import threading
import types
from asyncio import current_task
from asyncio.events import _get_running_loop
from collections.abc import Callable
from typing import Any

from ...contract.function import counting_frame
from ...contract.function import open_records as _OPEN
from .frames import quiet

__all__ = [
    "calls_here",
    "forget_full",
    "open_here",
    "register",
    "thread_state",
    "unregister",
    "walked",
]

_thread = threading.get_ident
_serials = itertools.count(1)
#: Code objects of the engine's frames that hold the calls they count (a decorated call's,
#: a decorated coroutine's), each with the way to read them from the frame's locals.
_WALKED: dict[types.CodeType, Callable[[Any], Any]] = {}


class _Registry:
    """The records open on one thread."""

    __slots__ = ("depth", "owners")

    def __init__(self) -> None:
        #: The records open, by the asyncio task that opened them (or None).
        self.owners: dict[Any, list[Any]] = {}
        #: How many are open.
        self.depth = 0


#: No tuple: what ``full`` holds until a tuple is found to hold every record open.
_NONE = object()


class _ThreadState(threading.local):
    #: The last tuple found to hold every record open here, each in a call not returned.
    full: Any = _NONE

    def __init__(self) -> None:
        self.registry = _Registry()


_state = _ThreadState()


def thread_state() -> _ThreadState:
    """This thread's state (read on every op: ``full``)."""
    return _state


def _task() -> Any:
    """The asyncio task running now on this thread, or None."""
    loop = _get_running_loop()
    return None if loop is None else current_task(loop)


def walked(code: types.CodeType, read: Callable[[Any], Any]) -> None:
    """Make frames of ``code`` tell the calls they count: ``read(locals)`` gives a tuple of
    calls (or None)."""
    _WALKED[code] = read


def register(session: Any) -> None:
    """A record opened on this thread: keep it under the task that opened it."""
    registry = _state.registry
    key = _task()
    session.owner = key
    session.serial = next(_serials)
    session.registry = registry
    registry.owners.setdefault(key, []).append(session)
    registry.depth += 1
    _state.full = _NONE
    _OPEN.add(session)


def unregister(session: Any) -> None:
    """A record closed (maybe in another task than the one that opened it)."""
    _OPEN.discard(session)
    registry = session.registry
    found = registry.owners.get(session.owner) if registry is not None else None
    if found is None or session not in found:
        return
    found.remove(session)
    if not found:
        del registry.owners[session.owner]
    registry.depth -= 1
    _state.full = _NONE


def forget_full() -> None:
    """A call returned or raised: the thread's ``full`` tuple may name it."""
    _state.full = _NONE


def calls_here() -> Any:
    """The innermost call of each record counting what runs here (see the module), as a
    tuple (outermost record first); None where none is; a dry run's frame as it is."""
    calls = counting_frame.get()
    if calls is _state.full:
        return calls
    return open_here(calls)


def open_here(calls: Any) -> Any:
    """:func:`calls_here` for the variable's value ``calls``."""
    registry = _state.registry
    if calls is not None and type(calls) is not tuple:
        return calls  # (a dry run's frame)
    if not registry.depth:
        return calls  # (no record on this thread: a copied context's are another's)
    if calls is None and quiet():
        return None  # (typedflops' own work, run with no frame)
    me = _thread()
    kept: list[Any] = []
    changed = False
    if type(calls) is tuple:
        for call in calls:
            session = call.session
            if session.closed or session.thread != me:
                changed = True
                continue
            if call.done:
                changed = True
                while call.done and call.parent is not None:
                    call = call.parent
            kept.append(call)
        if not changed and len(calls) == registry.depth:
            _state.full = calls  # (every record open here: nothing to add, whatever the task)
            return calls
    owners = registry.owners
    wanted = list(owners.get(None, ()))
    task = _task()
    if task is not None:
        wanted += owners.get(task, ())
    wanted = [session for session in wanted if not session.closed]
    have = {call.session for call in kept}
    missing = [session for session in wanted if session not in have]
    if missing:
        kept += _innermost(missing)
        kept.sort(key=_serial)
    elif not changed:
        return calls  # (some of the records open here: the others are other tasks')
    return tuple(kept) or None


def _serial(call: Any) -> int:
    return call.session.serial  # type: ignore[no-any-return]


def _innermost(sessions: list[Any]) -> list[Any]:
    """The innermost call of each record that is open on this thread's Python stack (its
    root where none is)."""
    found: dict[Any, Any] = {}
    wanted = set(sessions)
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and len(found) < len(wanted):
        read = _WALKED.get(frame.f_code)
        if read is not None:
            calls = read(frame.f_locals)
            if type(calls) is tuple:
                for call in calls:
                    session = call.session
                    if session in wanted and session not in found and not call.done:
                        found[session] = call
        frame = frame.f_back
    return [found.get(session) or session.root for session in sessions]
