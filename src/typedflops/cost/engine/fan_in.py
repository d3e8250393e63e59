"""The adds autograd's engine runs where one tensor feeds several differentiated ops.

Backward sends a gradient along each edge of the graph: one from every op that took a
tensor needing grad (two from ``x * x``). Where a tensor has ``k`` such edges (a residual
stream read by a block and by the add after it, a weight tied to an embedding and to the
output layer, one projection split into queries, keys and values), the engine sums the
``k`` gradients before it goes on: ``k - 1`` adds of the tensor's size, as
``loss.backward()`` runs them and a record around it counts them. A leaf's sum is made
before it reaches ``.grad`` (the accumulation into ``.grad`` itself is the optimizer's
side of a step, not counted).

So each op that creates edges tells :class:`GradientSums` which of its inputs it
differentiates (its backward replay says: :func:`.backward.backward_of`), and each edge
past a tensor's first adds a gradient sum: an event with no forward FLOPs whose backward
is the add, in the row where the edge was counted. An op's edges count once it is known to
reach backward (see :class:`GradientSums`): a branch read only off the graph
(``x.amax().detach()``) sends no gradient. An in-place op gives its tensor a new history:
its edges count from zero again. In a record, a backward that ran starts every count
again (a training loop's next forward builds a new graph), and each top-level call starts
its leaves' (parameters read by two calls are summed by neither call's own backward). A
block repeated in a dry run makes its first call's edges to what it reaches from outside
again (see :mod:`.calls`). Not seen: the edges of a ``torch.autograd.Function``'s own
inputs (its forward runs with autograd off).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from ...contract.walk import tensors_in
from .events import Event, Group, Sink, current_group, named_event, new_group
from .tensors import differentiable

__all__ = [
    "GradientSums",
    "Place",
    "Role",
    "backward_ran",
    "edges_of",
    "gradient_sum",
    "new_call",
    "reads_unseen",
    "replay_with",
    "role_tensor",
    "roles",
    "written",
]

_NAME = "gradient sum"
_ADD = "add (gradient sum)"
_SHARED = Group(_NAME, None, -1)


def gradient_sum(size: int, dtype: torch.dtype, adds: int, source: int, shared: bool) -> Event:
    """The event of ``adds`` sums of gradients of ``size`` values of ``dtype``, with no
    forward FLOPs (``source``: the tensor's ``id``, for a repeated block's bookkeeping in
    :mod:`.calls`); ``shared``: a record's, in a group of its own (as shared op events are).
    """
    nbytes = size * dtype.itemsize
    group = _SHARED if shared else (current_group() or new_group(_NAME))
    add = Event(
        op=_ADD,
        func=None,
        group=group,
        args=(),
        kwargs=(),
        out=None,
        flops=adds * size,
        entry=None,
        counted=True,
        bytes_read=2 * adds * nbytes,
        bytes_written=adds * nbytes,
        view=False,
        needs_grad=False,
        torch_counted=False,
    )
    event = named_event(_NAME, 0)  # (no forward FLOPs; its backward is the adds)
    event.group = group
    event.needs_grad = True
    event.backward = [add]
    event.source = source
    return event


# A tensor an edge goes to, held weakly (an op's output may wait long for its reader):
# the tensor, its id, whether it is a leaf, its size and its dtype.
_Input = tuple["weakref.ref[torch.Tensor]", int, bool, int, torch.dtype]


def _input(tensor: torch.Tensor) -> _Input:
    ref = weakref.ref(tensor)
    hash(ref)  # (kept: a reference whose tensor is gone hashes as it did)
    return (ref, id(tensor), tensor.grad_fn is None, tensor.numel(), tensor.dtype)


_UNSET: Any = object()
#: A record's gradient sums, by size, dtype and number of adds.
_SUMS: dict[tuple[int, torch.dtype, int], Event] = {}


class _Scope(threading.local):
    serial = 0


_scope = _Scope()


def new_call() -> None:
    """Note that a record's top-level call begins in this thread: the leaves it reads
    (parameters, inputs) start their edges afresh, as each call's own backward would."""
    _scope.serial += 1


# Backward passes that ran in a record so far: a tensor's edges from before one were sent
# their gradients by it (a training loop's next forward starts its sums afresh).
_PASSES = [0]


def backward_ran() -> None:
    """Note that autograd's engine ran a backward op in a record."""
    _PASSES[0] += 1


def edges_of(
    event: Event, keys: tuple[Any, Any], args: tuple[Any, ...], kwargs: Any
) -> tuple[int, ...] | None:
    """The inputs needing grad that ``event``'s op differentiates (their positions among
    them; None: every one), kept on the event. Which inputs an op differentiates depends on
    the op and on which of its inputs need grad, not on their sizes: one replay of its
    backward per such pattern says. Asked inside ``__torch_dispatch__``, below autograd:
    the replay runs with ``keys``, the dispatch keys outside the mode."""
    found = event.__dict__.get("_edges", _UNSET)
    if found is not _UNSET:
        return found  # type: ignore[no-any-return]
    if not _REPLAY:
        return None
    grads = tuple(t.requires_grad for t in _op_tensors(args, kwargs) if differentiable(t))
    pattern = (event.func, grads)
    found = _EDGES.get(pattern, _UNSET)
    if found is _UNSET:
        # (what the replay saves is its own: not the run's activations, nor a region's)
        with torch._C._ForceDispatchKeyGuard(*keys), _own_saves():
            found = _REPLAY[0](event).edges
        if len(_EDGES) > 4096:
            _EDGES.clear()
        _EDGES[pattern] = found
    event.__dict__["_edges"] = found
    return found  # type: ignore[no-any-return]


#: Edges by op and by which of its inputs need grad.
_EDGES: dict[Any, tuple[int, ...] | None] = {}


# The replay that finds an op's backward (see .backward, which counts with the counting
# mode and so sets it here).
_REPLAY: list[Callable[[Event], Any]] = []


def replay_with(find: Callable[[Event], Any]) -> None:
    """Find each op's edges with ``find`` (its backward: :func:`.backward.backward_of`)."""
    _REPLAY[:] = [find]


def _same(tensor: Any) -> Any:
    return tensor


def _own_saves() -> Any:
    """Saved-tensor hooks that keep what they are given, over those of the run (a dry
    run's, a checkpointed region's), where hooks may be pushed."""
    if torch._C._autograd._top_saved_tensors_default_hooks(False) is None:
        return contextlib.nullcontext()
    return torch.autograd.graph.saved_tensors_hooks(_same, _same)


# Where a record keeps an op's event: a call's items and its index there.
Place = tuple[list[Any], int]


class _Waiting:
    """An op's edges, counted once the op is known to reach backward; ``event``, where
    ``places`` keep it (a record's), taken off backward if it is known not to."""

    __slots__ = ("context", "event", "inputs", "left", "places")

    def __init__(
        self,
        inputs: list[_Input],
        left: int,
        event: Event | None,
        places: list[Place] | None,
        context: Any = None,
    ) -> None:
        self.inputs: list[_Input] | None = inputs
        self.left = left
        self.event = event
        self.places = places
        # Where the op ran (a record's calls, in its thread or task): its sums go there.
        self.context = context


class _Output:
    """An output of an op whose edges wait (``off``: an op that does not differentiate it
    read it, or a detached copy of it; ``copies``: its detached copies alive; ``let_go``:
    it is gone, its copies not; ``done``: decided)."""

    __slots__ = ("copies", "done", "let_go", "off", "ref", "waiting")

    def __init__(self, ref: weakref.ref[torch.Tensor], waiting: _Waiting) -> None:
        self.ref = ref
        self.waiting = waiting
        self.off = False
        self.copies = 0
        self.let_go = False
        self.done = False


class _Quiet(threading.local):
    on = False


_quiet = _Quiet()


@contextlib.contextmanager
def reads_unseen() -> Iterator[None]:
    """Reads inside the block are not off-graph reads (a saved-tensor hook's ``detach``)."""
    before, _quiet.on = _quiet.on, True
    try:
        yield
    finally:
        _quiet.on = before


class GradientSums:
    """How many edges each tensor has so far in one run or thread (tensors held weakly),
    and the sums that the edges past the first add, handed to ``sink``.

    An op's edges count once it is known to reach backward: when an op that differentiates
    its output reads it, or when its output is let go or is still held where a decorated
    call begins or returns, or where the run or the record ends (:meth:`settle`: the sums
    fall in the call that made the edges), with no op having read it off the graph. An op
    whose output only ops that do not differentiate it read (``x.amax().detach()``,
    ``full_like(x[0])``, ``x.max().item()``, ``x.abs() > t``) is not on the graph
    backward walks: its edges never count, nor does its own backward. A
    ``detach`` reads off the graph once its copy is read: autograd detaches each output it
    saves for backward, a copy no op reads. (An op two steps off such a read, as in
    ``x.abs().sum() > 0``, still counts.)"""

    __slots__ = (
        "_limit",
        "_pass",
        "detached",
        "gone",
        "place",
        "realm",
        "shared",
        "sink",
        "uses",
        "waiting",
        "where",
    )

    def __init__(self, sink: Sink, shared: bool = False) -> None:
        self.sink = sink
        self.shared = shared
        # Edges so far by tensor (its weak reference) and realm (a record's, see `realm`).
        self.uses: dict[tuple[weakref.ref[torch.Tensor], Any], tuple[int, int]] = {}
        self.waiting: dict[int, _Output] = {}
        # Detached copies of waiting outputs, by the copy's id; outputs let go while a
        # copy lives.
        self.detached: dict[int, tuple[weakref.ref[torch.Tensor], _Output]] = {}
        self.gone: list[_Output] = []
        self._limit = 4096
        self._pass = _PASSES[0]
        # A record's: where an op runs (its thread's or task's records), and how a sum is
        # handed to the records where the op that made the edge ran (asyncio tasks share a
        # thread, and an edge may be counted while another task runs).
        self.where: Callable[[], Any] | None = None
        self.place: Callable[[Any, Event], None] | None = None
        # A record's: the records a context counts for, kept apart (two tasks' records
        # reading one model count their own sums).
        self.realm: Callable[[Any], Any] | None = None

    def count(self, tensor: torch.Tensor) -> int:
        """The edges ``tensor`` has so far (a leaf's: in this top-level call)."""
        return self._before((weakref.ref(tensor), None), tensor.grad_fn is None)

    def use(self, tensor: torch.Tensor, edges: int = 1) -> None:
        """Add ``edges`` edges to ``tensor``: a sum for each past its first."""
        self._add(_input(tensor), edges)

    def _before(self, ref: tuple[weakref.ref[torch.Tensor], Any], leaf: bool) -> int:
        # (tensors are known by their weak reference, one per tensor: a tensor let go
        # keeps its count while an edge to it waits, and a new one never shares it)
        found = self.uses.get(ref)
        if found is None or (found[1] != _scope.serial and leaf):
            return 0
        return found[0]

    def _add(self, edge: _Input, edges: int, context: Any = None) -> None:
        self._check_pass()
        ref, key, leaf, size, dtype = edge
        realm = self.realm(context) if self.realm is not None else None
        before = self._before((ref, realm), leaf)
        self.uses[ref, realm] = (before + edges, _scope.serial)
        adds = edges if before else edges - 1
        if adds > 0:
            if self.shared:  # (a record's: one event for every sum alike, as for ops)
                event = _SUMS.get((size, dtype, adds))
                if event is None:
                    if len(_SUMS) > 4096:
                        _SUMS.clear()
                    event = _SUMS[size, dtype, adds] = gradient_sum(size, dtype, adds, 0, True)
            else:
                event = gradient_sum(size, dtype, adds, key, False)
            if context is not None and self.place is not None:
                self.place(context, event)
            else:
                self.sink.add(event)
        if len(self.uses) > self._limit:
            self._prune()

    def op(
        self,
        edges: tuple[int, ...] | None,
        args: tuple[Any, ...],
        kwargs: Any,
        out: Any,
        event: Event | None = None,
        places: list[Place] | None = None,
    ) -> None:
        """The edges of one op that needs grad: to its inputs needing grad at the positions
        ``edges`` (among them, in order; None: every one), counted once it reaches
        backward; the ops that made what it reads do. If it is known not to reach backward,
        ``event`` (kept at ``places`` in a record, else its own) costs no backward."""
        self._check_pass()
        if type(out) is _Tensor:  # (the usual)
            outputs = [out] if out.is_floating_point() or out.is_complex() else []
        else:
            outputs = [t for t in tensors_in(out, depth=2) if differentiable(t)]
        if not outputs:  # (a value read out, `.item()`: no node, no edge)
            edges = ()
        found = _op_tensors(args, kwargs)
        if self.detached:
            for tensor in found:
                self._read_detached(tensor)
        inputs = [t for t in found if t.requires_grad and differentiable(t)]
        chosen = []
        for index, tensor in enumerate(inputs):
            if edges is None or index in edges:
                chosen.append(tensor)
                self._reached(tensor)
            elif self.waiting:
                if event is not None and event.op == "detach":
                    self._detached(tensor, outputs)
                else:
                    self._read_off(tensor)
        if not chosen:
            return
        context = self.where() if self.where is not None else None
        waiting = _Waiting([_input(t) for t in chosen], len(outputs), event, places, context)
        if any(output is tensor for output in outputs for tensor in chosen):
            self._count(waiting)  # (in place: its edges go to the history it ends, now)
            return
        for output in outputs:
            key = id(output)
            ref = weakref.ref(output, functools.partial(self._let_go, key))
            self.waiting[key] = _Output(ref, waiting)

    def read(self, args: tuple[Any, ...], kwargs: Any) -> None:
        """An op that needs no grad read its arguments: off the graph."""
        for tensor in _op_tensors(args, kwargs):
            self._read_off(tensor)
            if self.detached:
                self._read_detached(tensor)

    def settle(self) -> None:
        """Count the edges of the ops whose output is still held (a result, a tensor the
        user keeps) and no op read off the graph: each may reach backward."""
        for key, output in list(self.waiting.items()):
            self.waiting.pop(key, None)
            self._decide(output)
        for output in self.gone:
            self._decide(output)
        self.gone.clear()
        self.detached.clear()

    def restart(self, tensors: Iterable[torch.Tensor]) -> None:
        """Tensors written in place: their next edges go to a new history."""
        for tensor in tensors:
            realm = self.realm(self.where()) if self.realm and self.where else None
            self.uses.pop((weakref.ref(tensor), realm), None)

    def _reached(self, tensor: torch.Tensor) -> None:
        found = self.waiting.pop(id(tensor), None)
        if found is not None and found.ref() is tensor:
            found.done = True
            self._count(found.waiting)

    def _detached(self, tensor: torch.Tensor, outputs: list[torch.Tensor]) -> None:
        # autograd detaches each output it saves for backward (a copy never read in the
        # forward): a detached copy is an off-graph read once an op reads the copy
        found = self.waiting.get(id(tensor))
        if found is None or found.ref() is not tensor:
            return
        for output in outputs:
            found.copies += 1
            ref = weakref.ref(output, functools.partial(self._copy_gone, found))
            self.detached[id(output)] = (ref, found)
        if len(self.detached) > self._limit:
            self.detached = {k: v for k, v in self.detached.items() if v[0]() is not None}

    def _read_detached(self, tensor: torch.Tensor) -> None:
        found = self.detached.get(id(tensor))
        if found is not None and found[0]() is tensor and not _quiet.on:
            found[1].off = True
            if found[1].let_go:
                self._decide(found[1])

    def _copy_gone(self, output: _Output, _: object = None) -> None:
        output.copies -= 1
        if output.let_go and output.copies <= 0:
            self._decide(output)

    def _read_off(self, tensor: torch.Tensor) -> None:
        found = self.waiting.get(id(tensor))
        if found is not None and found.ref() is tensor and not _quiet.on:
            found.off = True

    def _let_go(self, key: int, _: object = None) -> None:
        # (an output let go, read by nothing off the graph: a result dropped, which a
        # backward through it would have reached)
        found = self.waiting.get(key)
        if found is not None and found.ref() is None:
            del self.waiting[key]
            if found.copies > 0:  # (until a copy is read or gone)
                found.let_go = True
                self.gone.append(found)
                if len(self.gone) > self._limit:
                    self.gone = [output for output in self.gone if not output.done]
            else:
                self._decide(found)

    def _decide(self, output: _Output) -> None:
        """An output no differentiated op read: let go, or held at the end."""
        if output.done:
            return
        output.done = True
        waiting = output.waiting
        if not output.off:
            self._count(waiting)  # (what a backward through it would reach)
            return
        waiting.left -= 1
        if waiting.left <= 0 and waiting.inputs is not None:
            waiting.inputs = None
            _off_graph(waiting)

    def _count(self, waiting: _Waiting) -> None:
        inputs, waiting.inputs = waiting.inputs, None
        for edge in inputs or ():
            self._add(edge, 1, waiting.context)

    def _check_pass(self) -> None:
        if self._pass != _PASSES[0]:
            self._pass = _PASSES[0]
            self.uses.clear()
            self.waiting.clear()
            self.detached.clear()
            self.gone.clear()

    def _prune(self) -> None:
        # (a tensor let go keeps its count while an edge to it waits)
        outputs = (*self.waiting.values(), *self.gone)
        waits = {edge[0] for output in outputs for edge in output.waiting.inputs or ()}
        self.uses = {
            key: value
            for key, value in self.uses.items()
            if key[0]() is not None or key[0] in waits
        }
        self._limit = max(4096, 2 * len(self.uses))


def _off_graph(waiting: _Waiting) -> None:
    """An op read only off the graph: no backward of it runs. A record's event is shared
    by every call of the op alike: the call's items get a copy without backward."""
    event = waiting.event
    if event is None:
        return
    if waiting.places is None:  # (a dry run's own event)
        event.needs_grad = False
        return
    copy = object.__new__(Event)
    copy.__dict__.update(event.__dict__)
    copy.needs_grad = False
    for items, index in waiting.places:
        if index < len(items) and items[index] is event:
            items[index] = copy


_Tensor = torch.Tensor


def _op_tensors(args: tuple[Any, ...], kwargs: Any) -> list[torch.Tensor]:
    """An op's tensor arguments in order (an op takes tensors and lists of them), as
    :func:`~typedflops.contract.walk.tensors_in` finds them, in one pass."""
    found: list[torch.Tensor] = []
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, _Tensor):
            found.append(value)
        elif type(value) is list or type(value) is tuple:
            found.extend(item for item in value if isinstance(item, _Tensor))
    return found


@functools.lru_cache(maxsize=1024)
def _written_arguments(func: Any) -> tuple[tuple[int, str], ...]:
    return tuple(
        (index, argument.name)
        for index, argument in enumerate(func._schema.arguments)
        if argument.alias_info is not None and argument.alias_info.is_write
    )


def written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors an op writes in place (``add_``'s self, an ``out=``)."""
    found: list[torch.Tensor] = []
    for index, name in _written_arguments(func):
        value = args[index] if index < len(args) else kwargs.get(name)
        found.extend(tensors_in(value, depth=1))
    return found


# Where a tensor a block reaches came from: ("arg", i), ("module", i, name).
Role = tuple[Any, ...]


def roles(args: tuple[Any, ...], kwargs: Any) -> list[tuple[Role, torch.Tensor]]:
    """The tensors needing grad that a call reaches from outside: its tensor arguments and
    its modules' parameters and buffers, each with where it came from."""
    found: list[tuple[Role, torch.Tensor]] = [
        (("arg", index), tensor)
        for index, tensor in enumerate(tensors_in((args, kwargs)))
        if tensor.requires_grad
    ]
    for index, value in enumerate(args):
        if isinstance(value, torch.nn.Module):
            for name, tensor in (*value.named_parameters(), *value.named_buffers()):
                if tensor.requires_grad:
                    found.append((("module", index, name), tensor))
    return found


def role_tensor(role: Role, args: tuple[Any, ...], kwargs: Any) -> torch.Tensor | None:
    """The tensor of ``role`` in another call's arguments (None if it has none)."""
    try:
        if role[0] == "arg":
            return tensors_in((args, kwargs))[role[1]]
        module = args[role[1]]
        return dict((*module.named_parameters(), *module.named_buffers()))[role[2]]  # type: ignore[no-any-return]
    except (IndexError, KeyError, AttributeError):
        return None
