"""Python functions with a registered rule, seen while something counts.

An op that runs outside torch's dispatcher (a kernel from a C extension, a Triton launch
wrapped in a Python function) is invisible to the counting modes. ``register_rule(fn)``
names the Python function instead: while a session counts, a profile hook (``sys.setprofile``,
installed only then, chaining any profiler already there) sees each call of ``fn``, turns
the forward FLOPs of the ops it runs to 0 and adds one op with the rule's count.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from types import CodeType, FrameType
from typing import Any

from .events import group, named_event
from .rules import RuleEntry, function_rules

__all__ = ["inside_rule", "watching"]

_inside: ContextVar[int] = ContextVar("typedflops_inside_rule", default=0)


def inside_rule() -> bool:
    """Whether the current ops run inside a Python function whose rule gives the count."""
    return _inside.get() > 0


class _Watch:
    def __init__(self, sink: Any, rules: dict[CodeType, tuple[Any, RuleEntry]]) -> None:
        self.sink = sink
        self.rules = rules
        self.open: dict[FrameType, tuple[Any, Any, Any]] = {}
        self.previous: Any = sys.getprofile()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if self.previous is not None:
            self.previous(frame, event, arg)
        if event == "call":
            found = self.rules.get(frame.f_code)
            if found is not None:
                self._enter(frame, *found)
        elif event == "return" and frame in self.open:
            self._leave(frame)
        return None

    def _enter(self, frame: FrameType, fn: Any, entry: RuleEntry) -> None:
        args, kwargs = _arguments(fn, frame)
        count = entry.rule(*args, **kwargs)
        name = getattr(fn, "__name__", "function")
        scope = group(name)
        scope.__enter__()
        self.open[frame] = (scope, _inside.set(_inside.get() + 1), (name, int(count)))

    def _leave(self, frame: FrameType) -> None:
        scope, token, (name, count) = self.open.pop(frame)
        _inside.reset(token)
        self.sink.add(named_event(name, count))
        scope.__exit__(None, None, None)


def _arguments(fn: Any, frame: FrameType) -> tuple[list[Any], dict[str, Any]]:
    """The arguments of a call just entered, from its frame, as ``fn`` declared them."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    values = frame.f_locals
    for name, parameter in inspect.signature(fn).parameters.items():
        if name not in values:
            continue
        if parameter.kind is parameter.VAR_POSITIONAL:
            args.extend(values[name])
        elif parameter.kind is parameter.VAR_KEYWORD:
            kwargs.update(values[name])
        elif parameter.kind is parameter.KEYWORD_ONLY:
            kwargs[name] = values[name]
        else:
            args.append(values[name])
    return args, kwargs


@contextlib.contextmanager
def watching(sink: Any) -> Iterator[None]:
    """See the calls of registered Python functions inside the block (this thread)."""
    rules = function_rules()
    if not rules:
        yield
        return
    watch = _Watch(sink, rules)
    sys.setprofile(watch)
    try:
        yield
    finally:
        sys.setprofile(watch.previous)
