"""What an op's event depends on, as a key: ``record()`` keeps events by it, so an op seen
before costs a dict lookup.

An op's event (FLOPs by its rule, bytes, whether it needs a backward) is a function of the
op, its tensors' shapes, dtypes and ``requires_grad``, which arguments are one tensor, its
other arguments and the grad and checkpoint modes. Numbers in the schema's scalar slots (a
learning rate, a scale) are part of the key only as 0, 1 or -1 (which change what autograd
runs); others do not change a count, except those a rule reads (``cdist``'s ``p``) and a
norm's order (its backward is another formula at 2, at infinity, below 1), keyed by their
values. A number is keyed with its type (``x * 2`` on an integer tensor makes
integers, ``x * 2.0`` floats). An op whose output shape depends on values
(``x[x > 0]``, ``nonzero``), a factory op and an op outside ``aten`` are keyed by their
outputs too. A tensor that is not strided (sparse: its count depends on its values) gives
no key: its op is counted afresh every time, and so does a jagged batch's attention kernel
given its sequences' offsets (FlopCounterMode's rule reads their lengths: batches of one
shape and one longest sequence may differ). A kernel whose work its values decide
(``nll_loss`` skips the targets equal to ``ignore_index``: see :mod:`.skipped_work`) is
keyed by what they make it run too (how many targets it keeps), read on every call.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch

from . import rules
from .counter import _METADATA, _PASS_ON
from .device_runs import REFUSED_ONLY, RUNS
from .edges import written_arguments
from .events import Event
from .fast_calls import FAST_CALLS
from .op_events import make_event
from .rules import FREE, Free, RuleEntry, find_rule, is_view
from .saved import in_checkpoint
from .skipped_work import SKIPS

__all__ = [
    "EVENTS",
    "PLANS",
    "Plan",
    "find_event",
    "forget_events",
    "new_event",
    "op_key",
    "plan_of",
    "tensor_key",
    "view_key",
]

_Tensor = torch.Tensor
_STRIDED = torch.strided
_DYNAMIC = torch.Tag.dynamic_output_shape
_grad_enabled = torch._C.is_grad_enabled
_saved_hooks = torch._C._autograd._top_saved_tensors_default_hooks
# What a key holds of a tensor, read in one call; the layout last (checked, not kept).
_facts = operator.attrgetter("shape", "dtype", "requires_grad", "layout")
# The arguments whose values a rule of FlopCounterMode's reads: the offsets of a jagged
# batch's sequences, given to the attention kernels (each sequence is counted at its length).
# A grouped product's groups (``_grouped_mm``'s ``offs``: each expert's rows) likewise, and
# the targets and lengths of the losses counted by their values (see .value_rules).
_OFFSETS = frozenset(
    {"cum_seq_q", "cum_seq_k", "cu_seqlens_q", "cu_seqlens_k", "offs", "target", "targets"}
)
# Numbers whose values choose what autograd runs beyond 0, 1 or -1: a norm's order (its
# backward divides by the norm at 2, finds the maximum's places at infinity, raises to a
# power below 1).
_BACKWARD_CHOICES: dict[Any, tuple[str, ...]] = {
    torch.ops.aten.linalg_vector_norm: ("ord",),
    torch.ops.aten.norm: ("p",),
    torch.ops.aten.dist: ("p",),
    torch.ops.aten.renorm: ("p",),
}


class Plan:
    """How one op is keyed: its rule, whether its events may be kept, its scalar slots.

    Keys hold the plan (hashed by identity) rather than the op, whose hash is Python code.
    """

    __slots__ = (
        "arity",
        "built",
        "clone",
        "custom",
        "direct",
        "fast",
        "found",
        "guarded",
        "keep",
        "metadata",
        "number_names",
        "numbers",
        "offsets",
        "outputs",
        "quick",
        "run",
        "tensors",
        "valued",
        "view",
        "writes",
    )

    def __init__(self, func: Any) -> None:
        self.metadata = func in _METADATA
        self.clone = func is torch.ops.aten.clone.default  # (see counter.follow_materialized)
        overload = isinstance(func, torch._ops.OpOverload)
        # What calling the op does (OpOverload.__call__ is one more Python frame).
        # (an op torch's meta kernel refuses in a way the device does not: see RUNS)
        call = getattr(func, "_op", func) if overload else func
        self.run: Callable[..., Any] = RUNS.get(func) or call
        # What calls it on a first tensor that is not meta, where RUNS' function only
        # refuses on meta what a device refuses (``mm`` of two dtypes), else None.
        self.direct: Callable[..., Any] | None = call if func in REFUSED_ONLY else None
        # What runs it given ``arity`` positional arguments and no keywords, where a
        # Python binding of torch's runs that very op (see .fast_calls); else -1. (Not
        # on meta where RUNS' function runs it there.)
        fast = FAST_CALLS.get(func) if func not in RUNS or func in REFUSED_ONLY else None
        self.fast: Callable[..., Any] = fast[0] if fast is not None else call
        self.arity = fast[1] if fast is not None else -1
        found = find_rule(func) if overload and not self.metadata else None
        self.found: RuleEntry | Free | None = found
        user = isinstance(found, RuleEntry) and found.source == "user"
        # Ops without a rule go through the counting mode's own path (decompositions, nested
        # kernels); a user's rule may read values, so it is asked every time.
        self.keep = found is not None and not user and overload and func not in _PASS_ON
        numbers: list[int] = []
        names: set[str] = set()
        schema = getattr(func, "_schema", None)
        arguments = schema.arguments if schema is not None else ()
        # (numbers a rule reads, such as cdist's p, are keyed by their values)
        read = found.extra.get("values", ()) if isinstance(found, RuleEntry) else ()
        read = (*read, *_BACKWARD_CHOICES.get(getattr(func, "_overloadpacket", None), ()))
        for index, argument in enumerate(arguments):
            if argument.name in read:
                continue
            if str(argument.type) in ("number", "Optional[number]", "float", "Optional[float]"):
                names.add(argument.name)
                if not argument.kwarg_only:
                    numbers.append(index)
        self.numbers = frozenset(numbers)
        self.number_names = frozenset(names)
        # Arguments whose values the rule reads (position, name): a call given one is not kept.
        raw = isinstance(found, RuleEntry) and found.raw
        self.offsets = tuple(
            (index, argument.name)
            for index, argument in enumerate(arguments)
            if raw and argument.name in _OFFSETS
        )
        # (a kernel whose work its values decide: keyed by what they make it run too)
        self.valued = SKIPS.get(getattr(func, "_overloadpacket", None)) if overload else None
        namespace = getattr(func, "namespace", "aten")
        # A custom op runs with grad mode off inside its own autograd forward, where its
        # backward is still to come, and under torch.no_grad, where none is: grad mode does
        # not tell them apart, so its events made with grad mode off are not kept.
        self.custom = namespace != "aten"
        # (keyed by its outputs too: an op whose outputs its arguments do not fix, or one
        # RUNS runs as the device a record on meta stands for)
        self.outputs = (
            self.custom
            or _DYNAMIC in getattr(func, "tags", ())
            or (func in RUNS and func not in REFUSED_ONLY)
        )
        # Every positional argument a tensor (``mm``, ``relu``, ``add.Tensor``): called
        # without keywords, keyed by tensor_key (never a kernel its values decide, keyed by
        # op_key with what they make it run, and so never found by its tensors' guards).
        positional = [str(a.type) for a in arguments if not a.kwarg_only]
        self.tensors = (
            bool(positional)
            and not self.outputs
            and self.valued is None
            and set(positional) == {"Tensor"}
        )
        # A view that needs no backward costs nothing, whatever its shapes: keyed by view_key
        self.view = found is FREE and is_view(func) and not self.outputs
        # An op that writes an argument in place (``add_``, ``out=``)
        self.writes = bool(written_arguments(func))
        # The number of tensors (1 or 2) with which it runs through torch's binding and is
        # found by its tensors' guards in a record (see .key_guards), else -1; the guards of
        # the last tensor sets keyed so, and how many it made.
        usual = self.keep and self.tensors and not (self.view or self.clone or self.writes)
        self.quick = self.arity if usual and self.arity in (1, 2) and not self.metadata else -1
        self.guarded: tuple[tuple[Any, ...], ...] = ()
        self.built = 0


#: Plans by the op's identity (ops live as long as the process; _KEEP makes sure).
PLANS: dict[int, Plan] = {}
_KEEP: list[Any] = []
#: Events by key; emptied when it grows past a bound or when the user's rules change (their
# events keep what they saw).
EVENTS: dict[Any, Event] = {}
EVENTS_LIMIT = 1 << 16
_rules_seen: tuple[int, ...] = ()


def plan_of(func: Any) -> Plan:
    """The plan of an op (made on its first call)."""
    plan = PLANS.get(id(func))
    if plan is None:
        plan = PLANS[id(func)] = Plan(func)
        _KEEP.append(func)
    return plan


def forget_events() -> None:
    """Drop the plans and events kept, if the user's rules changed since they were made."""
    global _rules_seen
    stamp = tuple(id(entry) for entry in (*rules._USER.values(), *rules._USER_FUNCTIONS.values()))
    if stamp != _rules_seen:
        PLANS.clear()
        _KEEP.clear()
        EVENTS.clear()
        _rules_seen = stamp


def new_event(
    key: tuple[Any, ...] | None,
    func: Any,
    plan: Plan,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    out: Any,
) -> Event:
    """The event of an op not seen before, kept by ``key`` (unless None, or a tensor is
    not strided: its count may read its values)."""
    event = make_event(func, plan.found, args, kwargs or {}, out, shared=True)
    if key is not None and all(_strided(value) for value in args):
        if len(EVENTS) >= EVENTS_LIMIT:
            EVENTS.clear()
            for kept in PLANS.values():
                kept.guarded = ()
        EVENTS[key] = event
    return event


def find_event(
    key: tuple[Any, ...] | None,
    func: Any,
    plan: Plan,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    out: Any,
) -> tuple[tuple[Any, ...] | None, Event]:
    """An op's event, kept by ``key`` (None: not kept) or made (see :func:`new_event`);
    with the key it is kept by (None where an argument cannot be part of one)."""
    event = None
    if key is not None:
        try:
            event = EVENTS.get(key)
        except TypeError:  # an argument that cannot be a key
            key = None
    if event is None:
        event = new_event(key, func, plan, args, kwargs, out)
    return key, event


def tensor_key(plan: Plan, args: tuple[Any, ...], out: Any) -> tuple[Any, ...] | None:
    """:func:`op_key` for an op whose arguments are tensors, given positionally (the usual
    ``aten`` call; a number where the schema says tensor takes :func:`op_key`). Its layouts
    are in the key, checked when its event is made (:func:`new_event`): a key with another
    layout is never kept."""
    grad = _grad_enabled()
    try:
        if len(args) == 1:
            a = args[0]
            key: tuple[Any, ...] = (plan, grad, a.shape, a.dtype, a.requires_grad, a.layout)
        else:  # (two, the most usual, are keyed in the counting mode itself)
            ids = [id(t) for t in args]
            key = (plan, grad, *map(_facts, args), tuple(ids.index(i) for i in ids))
    except RuntimeError:  # a strided nested tensor has no shape
        return None
    except AttributeError:  # a number
        return op_key(plan, args, None, out)
    if grad and _saved_hooks(False) is not None and in_checkpoint():
        key += ("checkpoint",)
    return key


def view_key(plan: Plan, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """:func:`op_key` for a view (no FLOPs, no bytes, whatever the shapes) that needs no
    backward: the op, and whether it ran in a checkpointed region. None if it needs a
    backward (its event then holds its shapes, for the backward's count)."""
    if not _grad_enabled():
        return (plan, False)
    for value in args:
        if isinstance(value, _Tensor) and value.requires_grad:
            return None
    return (plan, True, _saved_hooks(False) is not None and in_checkpoint())


def _strided(value: Any) -> bool:
    return not isinstance(value, _Tensor) or value.layout is _STRIDED


def _number(value: Any) -> Any:
    kind = type(value)
    if value is None or kind is bool:
        return value
    try:
        return (kind, value) if value in (0, 1, -1) else kind
    except Exception:
        return kind


def _value_key(value: Any, seen: list[Any], number: bool = False) -> tuple[Any, ...] | None:
    """A value's part of a key: a tensor's facts (``seen`` takes the tensor), a list's
    items, a number in a scalar slot (``number``) as 0, 1, -1 or its type. None: not to be
    kept."""
    if isinstance(value, _Tensor):
        facts = _facts(value)
        if facts[3] is not _STRIDED:
            return None
        seen.append(value)
        return facts
    if type(value) is list or type(value) is tuple:
        key: tuple[Any, ...] = (len(value),)
        for item in value:
            part = _value_key(item, seen)
            if part is None:
                return None
            key += part
        return key
    # (with its type: 2 and 2.0 are equal keys, but an integer tensor times 2.0 is a float)
    return (_number(value),) if number else (type(value), value)


def op_key(
    plan: Plan, args: tuple[Any, ...], kwargs: dict[str, Any] | None, out: Any
) -> tuple[Any, ...] | None:
    """What an op's event depends on, as a hashable key (None: not to be kept)."""
    if plan.offsets and _given_offsets(plan, args, kwargs):
        return None
    grad = _grad_enabled()
    if not grad and plan.custom:
        return None  # (a custom op: with grad mode off, inside its autograd or not)
    key: tuple[Any, ...] = (plan, grad)
    seen: list[Any] = []
    numbers = plan.numbers
    part: tuple[Any, ...] | None
    try:
        for index, value in enumerate(args):
            part = _value_key(value, seen, index in numbers)
            if part is None:
                return None
            key += part
        if kwargs:
            for name, value in kwargs.items():
                part = _value_key(value, seen, name in plan.number_names)
                if part is None:
                    return None
                key += (name, *part)
        if plan.outputs or not seen:
            if isinstance(out, _Tensor) or type(out) is list or type(out) is tuple:
                part = _value_key(out, [])
                if part is None:
                    return None
                key += part
            else:
                key += (type(out),)
        count = len(seen)
        if count > 1 and (seen[0] is seen[1] if count == 2 else len(set(map(id, seen))) < count):
            # x * x reads x once: which arguments are one tensor is part of the key
            ids = [id(t) for t in seen]
            key += (tuple(ids.index(i) for i in ids),)
        if grad and _saved_hooks(False) is not None and in_checkpoint():
            key += ("checkpoint",)
        if plan.valued is not None:
            key += (plan.valued.key(args, kwargs or {}),)
    except RuntimeError:  # a strided nested tensor has no shape
        return None
    return key


def _given_offsets(plan: Plan, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    """Whether a call is given the offsets of a jagged batch, whose values its rule reads."""
    for index, name in plan.offsets:
        value = args[index] if index < len(args) else (kwargs or {}).get(name)
        if value is not None:
            return True
    return False
