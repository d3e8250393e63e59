"""What the engine records of an op: an :class:`Event`, and the user call (:class:`Group`)
it belongs to."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from .rules import OpCall, RuleEntry

__all__ = [
    "Event",
    "Group",
    "Sink",
    "current_group",
    "group",
    "named_event",
    "new_group",
    "new_serial",
    "saved_event",
]


@dataclass(frozen=True)
class Group:
    """One call a user wrote (``x @ w``, ``einsum(...)``): the events it ran form one row.
    ``plain``: its tensors are plain tensors (not a subclass, such as a nested tensor,
    whose results the gradient sums do not follow)."""

    name: str
    pattern: str | None
    serial: int
    plain: bool = True


@dataclass(eq=False)
class Event:
    """One ``aten`` op as it ran: what it saw (no tensors, only their metadata) and costs.

    Events are compared and hashed by identity (``record()`` keys calls on the events
    they ran, each kept once per distinct op).
    """

    op: str
    func: Any
    group: Group
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    out: Any
    flops: int
    entry: RuleEntry | None
    counted: bool
    bytes_read: int
    bytes_written: int
    view: bool
    needs_grad: bool
    torch_counted: bool
    # The part of ``flops`` that matrix products run (all of a matmul's, a fused kernel's
    # own products): what the ``matmul`` term of a Cost sums.
    matmul_flops: int = 0
    path: tuple[str, ...] = ()
    calls: tuple[int, ...] = ()
    backward: list[Event] = field(default_factory=list)
    # The event this one copies (a repeated block's), or None for an op that ran.
    origin: Event | None = None
    # Run again during backward: the forward of a torch.utils.checkpoint region.
    recomputed: bool = False
    # A torch.autograd.Function's backward: the forward it ran again to differentiate it
    # (reentrant checkpointing), kept apart from ``backward``.
    rerun: list[Event] = field(default_factory=list)
    # A sum of a tensor's gradients (see .fan_in): the tensor's id.
    source: int | None = None
    # An op with several floating-point outputs of which a gradient reaches some only
    # (``torch.var_mean(x, 1)[1]``): their positions among them (see .outputs_reached);
    # None: every one.
    reached: tuple[int, ...] | None = None
    # What its count took as given of values it did not have (a kernel that skips entries
    # by value, counted on meta or fake tensors: see .skipped_work), or None.
    assumed: str | None = None

    def call(self) -> OpCall:
        """The op as a rule sees it."""
        return OpCall(self.op, self.args, dict(self.kwargs), self.out)

    @property
    def signature(self) -> tuple[Any, ...]:
        """What determines the op's cost: the op and its arguments' metadata."""
        return (self.func, self.args, self.kwargs)


def named_event(name: str, flops: int | None = None) -> Event:
    """An event known by name only: work a rule counted as a whole (``flops``), or work
    that ran, or will run, without a rule (``flops=None``: listed, cost unknown)."""
    return Event(
        op=name,
        func=None,
        group=new_group(name),
        args=(),
        kwargs=(),
        out=None,
        flops=flops or 0,
        entry=None,
        counted=flops is not None,
        bytes_read=0,
        bytes_written=0,
        view=False,
        needs_grad=False,
        torch_counted=False,
    )


class Sink(Protocol):
    """Where events go: a list for dry runs, a row aggregate for ``record()``."""

    def add(self, event: Event) -> None: ...


_group: ContextVar[Group | None] = ContextVar("typedflops_group", default=None)
_serial = itertools.count()


def current_group() -> Group | None:
    """The user-level call the current ops belong to, if any."""
    return _group.get()


@contextlib.contextmanager
def group(name: str, pattern: str | None = None) -> Iterator[None]:
    """Name the ops run inside the block as one call (the wrapped einops ops use this)."""
    token = _group.set(Group(name, pattern, next(_serial)))
    try:
        yield
    finally:
        _group.reset(token)


def new_serial() -> int:
    """A serial number no group has had."""
    return next(_serial)


def new_group(name: str) -> Group:
    """A group of its own for one op that ran outside any named call."""
    return Group(name, None, next(_serial))


def saved_event(
    tensor: Any, nbytes: int, path: tuple[str, ...] = (), calls: tuple[int, ...] = ()
) -> Event:
    """A storage autograd saved for backward, as an event whose count is its bytes (so that
    its formula is fitted like an op's FLOPs), with the decorated call that saved it."""
    from .rules import saved_bytes_rule
    from .tensors import describe

    return Event(
        op="saved",
        func=None,
        group=Group("saved", None, -1),
        args=(describe(tensor),),
        kwargs=(),
        out=None,
        flops=nbytes,
        entry=saved_bytes_rule,
        counted=True,
        bytes_read=0,
        bytes_written=0,
        view=False,
        needs_grad=False,
        torch_counted=False,
        path=path,
        calls=calls,
    )
