"""The counting mode of ``record()``: one per thread, handing each op to the records open in
the current thread or asyncio task.

torch keeps one stack of modes per thread, entered and left in order; records nest, and
asyncio tasks interleave on one thread. So a record pushes no mode of its own: the first
record a thread opens pushes one :class:`RecordingMode` (and the :class:`NamingMode` that
names user calls), the last one to close takes them off, wherever they are on the stack.
Which records an op belongs to is read from
:data:`~typedflops.contract.function.counting_frame`, a ContextVar: a tuple holding, for
every record open in this thread or task (outermost first), the innermost decorated call
being counted (see :mod:`.recorder`). An op is added to each of them; a thread or task with
no record open passes its ops on untouched.

An op's event (FLOPs by its rule, bytes, whether it needs a backward) is a function of the
op, its tensors' shapes, dtypes and ``requires_grad``, its other arguments and the grad and
checkpoint modes: events are kept by that key, so an op seen before costs a dict lookup.
Numbers in the schema's scalar slots (a learning rate, a scale) are part of the key only as
0, 1 or -1 (which change what autograd runs); others do not change a count. An op whose
output shape depends on values (``x[x > 0]``, ``nonzero``), a factory op and an op outside
``aten`` are keyed by their outputs too.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

from ...contract.function import counting_frame
from . import rules
from .counter import _METADATA, _PASS_ON, CountingMode, GroupingMode, _group_name, make_event
from .events import Event, Group, current_group
from .events import _group as _current_group
from .functions import inside_rule
from .kernels import RMS_NORM, SDPA, meta_target, on_target
from .rules import Free, RuleEntry, find_rule, function_rules
from .saved import in_checkpoint

__all__ = [
    "NamingMode",
    "RecordingMode",
    "add_event",
    "current_mode",
    "entered",
    "group_label",
    "left",
    "thread_mode",
]

_Tensor = torch.Tensor
_STRIDED = torch.strided
_DYNAMIC = torch.Tag.dynamic_output_shape
_autograd_node = torch._C._current_autograd_node
_grad_enabled = torch.is_grad_enabled
_saved_hooks = torch._C._autograd._top_saved_tensors_default_hooks
_frame = counting_frame
_PLAIN = (torch.Tensor,)
# A record's root keeps at most this many pending items before it folds them into counts.
_ROOT_LIMIT = 4096
_serials = itertools.count(1)

#: The user call an op ran in: an einops ``Group``, or ``(name, serial)`` from
#: :class:`NamingMode`; None for an op run outside any named call.
Label = Any


class _Plan:
    """How one op is keyed: its rule, whether its events may be kept, its scalar slots.

    Keys hold the plan (hashed by identity) rather than the op, whose hash is Python code.
    """

    __slots__ = ("found", "keep", "metadata", "number_names", "numbers", "outputs", "run")

    def __init__(self, func: Any) -> None:
        self.metadata = func in _METADATA
        overload = isinstance(func, torch._ops.OpOverload)
        # What calling the op does (OpOverload.__call__ is one more Python frame).
        self.run: Callable[..., Any] = getattr(func, "_op", func) if overload else func
        found = find_rule(func) if overload and not self.metadata else None
        self.found: RuleEntry | Free | None = found
        user = isinstance(found, RuleEntry) and found.source == "user"
        # Ops without a rule go through the counting mode's own path (decompositions, nested
        # kernels); a user's rule may read values, so it is asked every time.
        self.keep = found is not None and not user and overload and func not in _PASS_ON
        numbers: list[int] = []
        names: set[str] = set()
        schema = getattr(func, "_schema", None)
        for index, argument in enumerate(schema.arguments if schema is not None else ()):
            if str(argument.type) in ("number", "Optional[number]", "float", "Optional[float]"):
                names.add(argument.name)
                if not argument.kwarg_only:
                    numbers.append(index)
        self.numbers = frozenset(numbers)
        self.number_names = frozenset(names)
        namespace = getattr(func, "namespace", "aten")
        self.outputs = namespace != "aten" or _DYNAMIC in getattr(func, "tags", ())


# Plans by the op's identity (ops live as long as the process; _KEEP makes sure).
_PLANS: dict[int, _Plan] = {}
_KEEP: list[Any] = []
# Events by key (see the module's docstring); emptied when it grows past a bound or when
# the user's rules change (their events keep what they saw).
_EVENTS: dict[Any, Event] = {}
_EVENTS_LIMIT = 1 << 16
_rules_seen: tuple[int, ...] = ()


def _rules_stamp() -> tuple[int, ...]:
    return tuple(id(entry) for entry in (*rules._USER.values(), *rules._USER_FUNCTIONS.values()))


def _number(value: Any) -> Any:
    if value is None or type(value) is bool:
        return value
    try:
        return value if value in (0, 1, -1) else type(value)
    except Exception:
        return type(value)


def _nested_key(value: Any, seen: list[Any]) -> tuple[Any, ...] | None:
    """A list argument (``cat``'s tensors, a shape) as a key (None: not to be kept)."""
    key: tuple[Any, ...] = (len(value),)
    for item in value:
        if isinstance(item, _Tensor):
            if item.layout is not _STRIDED:
                return None
            key += (item.shape, item.dtype, item.requires_grad)
            seen.append(item)
        elif type(item) is list or type(item) is tuple:
            inner = _nested_key(item, seen)
            if inner is None:
                return None
            key += inner
        else:
            key += (item,)
    return key


def op_key(
    plan: _Plan, args: tuple[Any, ...], kwargs: dict[str, Any] | None, out: Any
) -> tuple[Any, ...] | None:
    """What an op's event depends on, as a hashable key (None: not to be kept)."""
    grad = _grad_enabled()
    key: tuple[Any, ...] = (plan, grad)
    seen: list[Any] = []
    numbers = plan.numbers
    nested: tuple[Any, ...] | None
    try:
        index = -1
        for value in args:
            index += 1
            if isinstance(value, _Tensor):
                if value.layout is not _STRIDED:
                    return None
                key += (value.shape, value.dtype, value.requires_grad)
                seen.append(value)
            elif type(value) is list or type(value) is tuple:
                nested = _nested_key(value, seen)
                if nested is None:
                    return None
                key += nested
            elif numbers and index in numbers:
                key += (_number(value),)
            else:
                key += (value,)
        if kwargs:
            for name, value in kwargs.items():
                if isinstance(value, _Tensor):
                    if value.layout is not _STRIDED:
                        return None
                    key += (name, value.shape, value.dtype, value.requires_grad)
                    seen.append(value)
                elif type(value) is list or type(value) is tuple:
                    nested = _nested_key(value, seen)
                    if nested is None:
                        return None
                    key += (name, *nested)
                elif name in plan.number_names:
                    key += (name, _number(value))
                else:
                    key += (name, value)
        if plan.outputs or not seen:
            if isinstance(out, _Tensor):
                if out.layout is not _STRIDED:
                    return None
                key += (out.shape, out.dtype)
            elif type(out) is list or type(out) is tuple:
                nested = _nested_key(out, [])
                if nested is None:
                    return None
                key += nested
            else:
                key += (type(out),)
        count = len(seen)
        if count > 1 and (seen[0] is seen[1] if count == 2 else len(set(map(id, seen))) < count):
            # x * x reads x once: which arguments are one tensor is part of the key
            ids = [id(t) for t in seen]
            key += (tuple(ids.index(i) for i in ids),)
        if grad and _saved_hooks(False) is not None and in_checkpoint():
            key += ("checkpoint",)
    except RuntimeError:  # a strided nested tensor has no shape
        return None
    return key


def _add(calls: tuple[Any, ...], event: Event, label: Label) -> None:
    pair = (event, label)
    for call in calls:
        items = call.items
        items.append(pair)
        if call.parent is None and len(items) > _ROOT_LIMIT:
            call.session.fold()


def add_event(event: Event) -> None:
    """Hand an event (a whole call counted by a rule, one without a rule) to the records
    open in this thread or task."""
    calls = _frame.get()
    if type(calls) is tuple:
        mode = _state.mode
        label = current_group() or (mode.group if mode is not None else None)
        _add(calls, event, label)


class _Sink:
    """Where the counting mode's own path (and watched Python functions) puts events."""

    def add(self, event: Event) -> None:
        add_event(event)


class RecordingMode(CountingMode):  # type: ignore[no-untyped-call]
    """The dispatch mode of one thread while a record is open in it (see the module)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ so that dynamo never traces it: a fifth
        # of a mode's time on small ops. The same is had for free by marking its code as
        # skipped, with everything it calls (see _keep_dynamo_out), done on first use.
        return False

    def __init__(self) -> None:
        super().__init__(_Sink())
        self.group: Label = None  # the user call being run (set by NamingMode)
        self.naming = NamingMode(self)
        self.grouping = self.naming
        self.watch: Any = None

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        plan = _PLANS.get(id(func))
        if plan is None:
            plan = _PLANS[id(func)] = _Plan(func)
            _KEEP.append(func)
        if plan.metadata:
            return NotImplemented  # as FlopCounterMode: a subclass (a nested tensor) answers
        calls = _frame.get()
        if type(calls) is not tuple or self.paused or _autograd_node() is not None:
            # nothing recorded here, or autograd's backward (costed per forward op)
            return func(*args, **kwargs) if kwargs else func(*args)
        if (types and types != _PLAIN) or not plan.keep or (self.watch and inside_rule()):
            # a tensor subclass, an op without a rule or with the user's: the counting
            # mode's own path
            return CountingMode.__torch_dispatch__(self, func, types, args, kwargs)
        out = plan.run(*args, **kwargs) if kwargs else plan.run(*args)
        key = op_key(plan, args, kwargs, out)
        event = None
        if key is not None:
            try:
                event = _EVENTS.get(key)
            except TypeError:  # an argument that cannot be a key
                key = None
        if event is None:
            event = make_event(func, plan.found, args, kwargs or {}, out)
            if key is not None:
                if len(_EVENTS) >= _EVENTS_LIMIT:
                    _EVENTS.clear()
                _EVENTS[key] = event
        pair = (event, _current_group.get() or self.group)
        for call in calls:
            items = call.items
            items.append(pair)
            if call.parent is None and len(items) > _ROOT_LIMIT:
                call.session.fold()
        if event.needs_grad:
            self._custom_backwards(args, kwargs or {})
        return out


class NamingMode(GroupingMode):
    """Names each top-level torch call the user made (``matmul``, ``softmax``): the ops it
    runs form one row of a breakdown. On ``meta`` tensors inside
    :func:`~.kernels.kernels_of`, attention and RMS norm run the kernels that device would
    pick, as in a dry run, so that a record on meta and an estimate count alike."""

    def __init__(self, counter: RecordingMode) -> None:
        super().__init__(counter)
        self.recording = counter

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        mode = self.recording
        if (
            mode.group is not None
            or type(_frame.get()) is not tuple
            or mode.paused
            or _current_group.get() is not None
        ):
            return func(*args, **kwargs)
        try:
            name = _group_name(func)
        except TypeError:  # an unhashable callable
            name = None
        if name is None:
            return func(*args, **kwargs)
        mode.group = (name, next(_serials))
        try:
            if (func is SDPA or func is RMS_NORM) and _on_meta(args):
                target = meta_target()
                if target is not None:  # as a dry run of the call would (see .kernels)
                    return on_target(target, func, args, kwargs)
            return func(*args, **kwargs)
        finally:
            mode.group = None


def _on_meta(args: tuple[Any, ...]) -> bool:
    first = args[0] if args else None
    return isinstance(first, _Tensor) and first.is_meta


def group_label(label: Label, event: Event) -> tuple[str, str | None]:
    """The name and pattern of the user call an op ran in (its own name when none)."""
    if label is None:
        return event.op, None
    if isinstance(label, Group):
        return label.name, label.pattern
    return label[0], None


# -- one mode per thread -------------------------------------------------------------------


class _ThreadState(threading.local):
    mode: RecordingMode | None = None
    depth: int = 0


_state = _ThreadState()


def thread_mode() -> RecordingMode | None:
    """The recording mode of this thread, while a record is open in it."""
    return _state.mode


def current_mode() -> CountingMode | None:
    """The mode counting the ops run here: this thread's recording mode inside a record,
    a dry run's own inside it, or None."""
    frame = _frame.get()
    if type(frame) is tuple:
        return _state.mode
    return getattr(getattr(frame, "session", None), "mode", None)


def entered() -> None:
    """A record opened in this thread: push the thread's modes if it is the first."""
    global _rules_seen
    state = _state
    state.depth += 1
    if state.depth > 1:
        return
    stamp = _rules_stamp()
    if stamp != _rules_seen:
        _PLANS.clear()
        _KEEP.clear()
        _EVENTS.clear()
        _rules_seen = stamp
    if not _dynamo_kept_out:
        _keep_dynamo_out()
    mode = RecordingMode()
    mode.__enter__()  # type: ignore[no-untyped-call]
    mode.naming.__enter__()  # type: ignore[no-untyped-call]
    state.mode = mode
    watched = function_rules()
    if watched:
        mode.watch = _install_watch(watched)


def left() -> None:
    """A record closed in this thread: take the thread's modes off after the last one,
    wherever they are on torch's stacks (an asyncio task may close its record while another
    task's mode is above it)."""
    state = _state
    state.depth -= 1
    if state.depth > 0 or state.mode is None:
        return
    mode, state.mode = state.mode, None
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


_dynamo_kept_out = False


def _keep_dynamo_out() -> None:
    """Make dynamo skip :meth:`RecordingMode.__torch_dispatch__` and all it calls (a
    compiled function called inside a record runs its ops eagerly through it)."""
    global _dynamo_kept_out
    raw = RecordingMode.__dict__["__torch_dispatch__"]
    try:
        from torch._dynamo import eval_frame, types

        skip = types.FrameAction.SKIP  # type: ignore[attr-defined]
        strategy = types.FrameExecStrategy(skip, skip)  # type: ignore[attr-defined]
        eval_frame.set_code_exec_strategy(raw.__code__, strategy)  # type: ignore[attr-defined]
    except (ImportError, AttributeError, TypeError):  # as torch does it, then
        wrapped = torch._disable_dynamo(raw, recursive=True)  # type: ignore[attr-defined]
        RecordingMode.__torch_dispatch__ = wrapped  # type: ignore[method-assign]
    _dynamo_kept_out = True


def _install_watch(watched: dict[Any, Any]) -> Any:
    from .functions import _Watch

    watch = _Watch(_Sink(), watched)
    sys.setprofile(watch)
    return watch
