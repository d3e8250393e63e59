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
(``x.amax().detach()``) sends no gradient. Of an op with several outputs, which are
reached is noted too (its backward is theirs, see :mod:`.outputs_reached`). An in-place
op reaches backward as others do, through the tensor it wrote (see :mod:`.in_place`), and
gives its tensor a new history: its edges count from zero again; one through a view
gives its base a new history too, with an edge to the old one, and a view read after its
base was written is a new node with an edge to the base (autograd's ``CopySlices`` and
regenerated views: slice assignment, ``F.pad``'s circular mode). In a record, a backward
that ran starts every count again (a training loop's next forward builds a new graph), and
each top-level call starts its leaves' (parameters read by two calls are summed by neither
call's own backward). A block repeated in a dry run makes its first call's edges to what
it reaches from outside again (see :mod:`.calls`). The ops of a
``torch.autograd.Function``'s forward, run with autograd off, are one op (:mod:`.function_inputs`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from ...contract.walk import tensors_in
from .detached_copies import note_copies, read_copy, saved_copy
from .edges import flows_of, op_tensors, split_of
from .events import Event, Sink
from .held_views import Deferred, HeldView, defer, hold, reached, read_held, release, take_credit
from .in_place import rebased_views, regenerate, rewrite
from .outputs_reached import died, dropped_unread, kept, reach, read_one
from .saved_reads import SavedReads, lose, reread
from .tensors import differentiable
from .waits import (
    PASSES,
    TRIM,
    EdgeInput,
    Place,
    Split,
    Waiting,
    WaitingOutput,
    always,
    never,
    off_graph,
    quiet,
    scope,
    sums_event,
)

__all__ = ["GradientSums"]

_OWN_CODE = -1  # (the top-level call of an edge made in a record's own code)


class GradientSums:
    """How many edges each tensor has so far in one run or thread (tensors held weakly),
    and the sums that the edges past the first add, handed to ``sink``.

    An op's edges count once it is known to reach backward: once an output of it is a
    result a backward may start from (held where a decorated call begins or returns, or
    where the run or the record ends: :meth:`settle`; let go by a record's own code,
    outside its calls), or is read by an op that reaches backward. An op no such path
    reaches costs no backward and makes no edge: its outputs read only by ops that do not
    differentiate them (``x.amax().detach()``, ``x.abs().sum() > 0``, ``x.max().item()``)
    or let go unread inside the function costed (``out, _ = attention(x, x, x)``). A
    ``detach`` reads off the graph once its copy is read, and a ``clone`` right before an
    in-place op on its input is autograd's saved copy: autograd detaches each output it
    saves for backward, and copies what an in-place op overwrites, copies no op reads."""

    __slots__ = (
        "_clone",
        "_copies_limit",
        "_gone_limit",
        "_pass",
        "_uses_limit",
        "credits",
        "deferred",
        "detached",
        "elsewhere",
        "gone",
        "held_views",
        "histories",
        "holding",
        "inside",
        "internal",
        "made",
        "place",
        "reads",
        "realm",
        "shared",
        "sink",
        "uses",
        "view_parents",
        "waiting",
        "where",
    )

    def __init__(self, sink: Sink, shared: bool = False) -> None:
        self.sink = sink
        self.shared = shared
        # Edges so far by tensor (its weak reference) and realm (a record's, see `realm`).
        # Edges so far by tensor, realm and history (and a leaf's by the top-level call
        # its edges were made in).
        self.uses: dict[tuple[weakref.ref[torch.Tensor], Any, int, int | None], int] = {}
        # Tensors written in place, and how many times: an edge to a tensor goes to the
        # history it had when the op read it, even if counted after a write.
        self.histories: dict[weakref.ref[torch.Tensor], int] = {}
        # Views made after a write, by the history of their base that their node's edge
        # goes to (see `_regenerate`).
        self.made: dict[weakref.ref[torch.Tensor], int] = {}
        self.waiting: dict[int, WaitingOutput] = {}
        # Views held at a call's boundary whose edge may yet reach nothing (see
        # .held_views), by id; whether such an edge is being counted.
        self.held_views: dict[int, HeldView] = {}
        self.reads = SavedReads()  # (saved tensors a backward building a graph reads)
        self.view_parents: dict[int, tuple[weakref.ref[torch.Tensor], list[int]]] = {}
        self.credits: dict[Any, int] = {}
        self.deferred: dict[Any, list[Deferred]] = {}  # (sums a held view may take back)
        self.holding = False
        # Detached copies of waiting outputs, by the copy's id; outputs let go while a
        # copy lives.
        self.detached: dict[int, tuple[weakref.ref[torch.Tensor], WaitingOutput]] = {}
        self.gone: list[WaitingOutput] = []
        # The sizes past which uses, detached copies and outputs gone are trimmed to those
        # still needed: twice what a trim keeps (trims of things all needed stay linear).
        self._uses_limit = self._copies_limit = self._gone_limit = TRIM
        self._pass = PASSES[0]
        # The last op, if a clone of a tensor needing grad: (its input, its output's key).
        self._clone: tuple[torch.Tensor, int] | None = None
        # A record's: where an op runs (its thread's or task's records), and how a sum is
        # handed to the records where the op that made the edge ran (asyncio tasks share a
        # thread, and an edge may be counted while another task runs).
        self.where: Callable[[], Any] | None = None
        self.place: Callable[[Any, Event], None] | None = None
        # A record's: the records a context counts for, kept apart (two tasks' records
        # reading one model count their own sums).
        self.realm: Callable[[Any], Any] | None = None
        # Whether a tensor let go now is let go inside the function being costed (a dry
        # run's, a record's user call), where no backward starts from it; a record's
        # own code, outside its calls, may start one from anything it held.
        self.inside: Callable[[], bool] = always
        # Whether a tensor let go now is a temporary of one torch call of a record's own
        # code (``isclose``'s difference, ``matrix_rank``'s tolerance), or let go in a
        # module's forward its block called (``elsewhere``): never the user's.
        self.internal: Callable[[], bool] = never
        self.elsewhere: Callable[[], bool] = never

    def count(self, tensor: torch.Tensor) -> int:
        """The edges ``tensor`` has so far (a leaf's: in this top-level call)."""
        self._check_pass()
        ref = self.reads.ref(tensor)
        call = (scope.serial if self.inside() else _OWN_CODE) if tensor.grad_fn is None else None
        return self.uses.get((ref, None, self.histories.get(ref, 0), call), 0)

    def use(self, tensor: torch.Tensor, edges: int = 1) -> None:
        """Add ``edges`` edges to ``tensor``: a sum for each past its first."""
        self._check_pass()
        self._add(self._input(tensor), edges)
        if len(self.uses) > self._uses_limit:
            self._prune()

    def _input(self, tensor: torch.Tensor) -> EdgeInput:
        ref = self.reads.ref(tensor)
        hash(ref)  # (kept: a reference whose tensor is gone hashes as it did)
        history = self.histories.get(ref, 0) if self.histories else 0
        leaf = tensor.grad_fn is None
        # (a leaf's edges count afresh in each top-level call; a record's own code, outside
        # its calls, shares one count across them)
        call = scope.serial if self.inside() else _OWN_CODE
        return (ref, id(tensor), leaf, tensor.numel(), tensor.dtype, history, call)

    def _add(self, edge: EdgeInput, edges: int, context: Any = None) -> None:
        # (each way in checks the pass first: a decision never straddles two)
        ref, _, leaf, _, _, history, call = edge
        if self.held_views and not self.holding:
            reached(self, ref())
        realm = self.realm(context) if self.realm is not None else None
        # (tensors are known by their weak reference, one per tensor: a tensor let go
        # keeps its count while an edge to it waits, and a new one never shares it; a
        # leaf's count is its top-level call's, where the edge was made, counted when
        # the op is known to reach backward, maybe after the next call began)
        if self.reads.reread and ref in self.reads.reread:  # (see .saved_reads)
            reread(self, ref)
        found = (ref, realm, history, call if leaf else None)
        before = self.uses.get(found, 0)
        self.uses[found] = before + edges
        adds = edges if before else edges - 1
        if adds > 0 and self.credits:
            adds = take_credit(self, found, adds)
        if adds > 0 and not (self.held_views and defer(self, found, (adds, edge, context))):
            self.hand_sum(adds, edge, context)

    def hand_sum(self, adds: int, edge: EdgeInput, context: Any) -> None:
        """Count ``adds`` sums of the gradients of ``edge``'s tensor, in ``context``'s row."""
        self._hand(sums_event(edge[3], edge[4], adds, edge[1], self.shared), context)

    def _hand(self, event: Event, context: Any) -> None:
        """Count ``event`` where the op it comes from ran (a record's), or in the sink."""
        if context is not None and self.place is not None:
            self.place(context, event)
        else:
            self.sink.add(event)

    def op(
        self,
        edges: tuple[int, ...] | None,
        args: tuple[Any, ...],
        kwargs: Any,
        out: Any,
        event: Event | None = None,
        places: list[Place] | None = None,
        written: Sequence[torch.Tensor] = (),
    ) -> None:
        """The edges of one op that needs grad: to its inputs needing grad at the positions
        ``edges`` (among them, in order; None: every one), counted once it reaches
        backward; the ops that made what it reads do. If it is known not to reach backward,
        ``event`` (kept at ``places`` in a record, else its own) costs no backward.
        ``written``: the tensors it writes in place.

        Views as autograd has them: an op writing a view in place gives the view's base a
        new node (``CopySlices``) with an edge to the base's old node (the view op's own
        edge stands for it while no op read the view before, if it read the base itself); a
        view read after its base
        was written (through it, another view, or itself) is a new node
        (``AsStridedBackward``) with one edge to the base as it is now, and its view op's
        edge counts only if an op read it before."""
        self._check_pass()
        if type(out) is _Tensor:  # (the usual)
            outputs = [out] if out.is_floating_point() or out.is_complex() else []
        else:
            outputs = [t for t in tensors_in(out, depth=2) if differentiable(t)]
        if not outputs:  # (a value read out, `.item()`: no node, no edge)
            edges = ()
        found = op_tensors(args, kwargs)
        if self.detached:
            for tensor in found:
                read_copy(self, tensor)
        inputs = [t for t in found if t.requires_grad and differentiable(t)]
        clone, self._clone = self._clone, None
        chosen, positions = [], []
        if written and self.held_views:  # (what it reads reaches them before it writes)
            read_held(self, [t for t in inputs if all(t is not w for w in written)], event, [])
        rebased = rebased_views(self, written) if written else []
        for index, tensor in enumerate(inputs):
            if rebased and any(tensor is view for view, _ in rebased):
                continue
            if edges is None or index in edges:
                chosen.append(tensor)
                positions.append(index)
            elif self.waiting:
                if event is not None and event.op == "detach":
                    note_copies(self, tensor, outputs)
                else:
                    self._read_off(tensor)
        if self.held_views:  # (read before its base is written: see .held_views)
            read_held(self, chosen, event, outputs)
        if self.histories:  # (a tensor was written in place: a view read may be a new node)
            self._regenerate(chosen)
        bases = [base for _, base in rebased] if outputs else []
        if not chosen and not bases:
            return
        edges_to = [self._input(t) for t in (*chosen, *bases)]
        context = self.where() if self.where is not None else None
        waiting = Waiting(edges_to, len(outputs), event, places, context)
        source_at: list[int] = []
        flows = flows_of(event) if event is not None and len(outputs) > 1 else None
        split = split_of(event) if event is not None and flows is not None else None
        lazy = True
        if self.waiting:
            # (a view op's node may be replaced before anything reads it, its base written
            # in place, an op inside one torch call of a record's own code may make a
            # temporary, and an op whose outputs send gradients to different inputs reaches
            # what it read through the outputs reached: in own code too, they reach backward
            # only if their outputs do, so what they read waits on them)
            lazy = (
                self.inside()
                or self.internal()
                or split is not None
                or (event is not None and getattr(event.func, "is_view", False))
            )
            for tensor, position in zip(chosen, positions, strict=True):
                source = self.waiting.get(id(tensor))
                if source is None or source.ref() is not tensor or source.done:
                    continue
                for dropped in read_one(source.waiting):  # (see .outputs_reached)
                    self._decide(dropped)
                if lazy:  # (it reaches backward if a reader does)
                    source.readers += 1
                    source.off = True
                    waiting.sources.append(source)
                    source_at.append(position)
                else:  # (a record's own code: a reader is taken as reaching backward)
                    source.done = True
                    reach(source)
                    self._live(source.waiting)
        if any(output is tensor for output in outputs for tensor in (*chosen, *written)):
            if clone is not None and any(clone[0] is output for output in outputs):
                saved_copy(self, clone)
            if len(outputs) > 1:  # (its edges go to the history it ends, taken as reached)
                self._live(waiting)
            else:  # (its tensor's new node: see .in_place)
                rewrite(self, waiting, outputs[0], chosen, written, bases, lazy)
            return
        if event is not None and event.func is _CLONE and len(chosen) == 1:
            self._clone = (chosen[0], id(out))
        if flows is not None:
            waiting.alive = waiting.open = len(flows)
            if split is not None:  # (`torch._foreach_mul`: each output its own input's)
                at: list[int | None] = [*positions, *(None for _ in bases)]
                waiting.split = Split(split, at, source_at)
        for index, output in enumerate(outputs):
            key = id(output)
            ref = weakref.ref(output, functools.partial(self._let_go, key))
            made = self.waiting[key] = WaitingOutput(ref, waiting, index)
            made.inert = flows is not None and index not in flows
        if self.histories and found and event is not None and getattr(event.func, "is_view", False):
            # (a view's node has its edge to the base's history now: the view op's own)
            base = found[0]._base if found[0]._base is not None else found[0]
            now = self.histories.get(weakref.ref(base), 0)
            for output in outputs:
                self.made[weakref.ref(output)] = now

    def _regenerate(self, tensors: list[torch.Tensor]) -> None:
        """Views among ``tensors`` whose base was written in place since their node was
        made: new nodes reading the base as it is now (see :func:`.in_place.regenerate`)."""
        regenerate(self, tensors)

    def _stale(
        self,
        view: torch.Tensor | None,
        viewed: tuple[weakref.ref[torch.Tensor], int] | None = None,
    ) -> bool:
        """Whether ``view`` is a view whose base was written in place since its node was
        made: autograd makes it a new node when it is next used (see :meth:`_regenerate`),
        so no backward starts from the node of its view op. A view let go is told by
        ``viewed`` (see :meth:`_note_base`)."""
        if view is None and viewed is not None and viewed[0]() is not None:
            return self.histories.get(viewed[0], 0) != viewed[1]
        if view is None or view._base is None:
            return False
        now = self.histories.get(weakref.ref(view._base), 0)
        return self.made.get(weakref.ref(view), 0) != now

    def _note_base(self, output: WaitingOutput) -> None:
        """``output``, a result again, may be a view let go after its base is written (its
        node then reached by nothing): its base and the base's history it reads, noted."""
        view = output.ref()
        if view is not None and view._base is not None:
            made = self.made.get(weakref.ref(view), 0)
            output.viewed = (weakref.ref(view._base), made)

    def _unread(self, view: torch.Tensor) -> bool:
        """Whether ``view``'s view op waits and no op read its output yet."""
        found = self.waiting.get(id(view))
        return found is not None and found.ref() is view and not found.done and not found.readers

    def _replaced(self, view: torch.Tensor) -> None:
        """``view`` has a new node: its view op's output starts no backward now, and its
        op reaches backward only through the ops that read it before."""
        found = self.waiting.get(id(view))
        if found is not None and found.ref() is view and not found.done:
            del self.waiting[id(view)]
            found.off = True
            self._decide(found)

    def read(self, args: tuple[Any, ...], kwargs: Any) -> None:
        """An op that needs no grad read its arguments: off the graph."""
        self._check_pass()
        self._clone = None
        for tensor in op_tensors(args, kwargs):
            self._read_off(tensor)
            if self.detached:
                read_copy(self, tensor)

    def settle(self, started: bool = False, boundary: bool = False) -> None:
        """Count the edges of the ops whose output is still held (a result, a tensor the
        user keeps) and no op read: each may reach backward; and of the ops that made what
        they read. Every waiting op is decided. ``started``: a backward started from
        something held (the seed ``.backward()`` makes reads its root): all held is.
        ``boundary``: a decorated call begins or returns (a view's edge counted then is
        taken back if its base is written first, see :mod:`.held_views`)."""
        if not started:
            self._check_pass()
        for key, output in list(self.waiting.items()):
            self.waiting.pop(key, None)
            if started and not (output.rootless or output.saved):
                output.off = False
            self._decide(output, boundary)
        for output in self.gone:
            self._decide(output)
        self.gone.clear()
        self.detached.clear()
        if not boundary and (self.deferred or self.held_views):  # (none is taken back now)
            release(self, everything=True)

    def places_in(self, items: list[Any]) -> list[tuple[int, list[Place], int]]:
        """The events in ``items`` (a record's call's) of the ops whose edges still wait:
        each as its index there, and the list of places holding it with its position in
        that list (to move it when the items move)."""
        found: list[tuple[int, list[Place], int]] = []
        seen: set[int] = set()
        for output in (*self.waiting.values(), *self.gone):
            waiting = output.waiting
            places = waiting.places
            if waiting.inputs is None and (waiting.count < 2 or output.done or output.inert):
                continue  # (decided; an op with several outputs waits for each a gradient
                # may reach: see .outputs_reached)
            if not places or id(waiting) in seen:
                continue  # (a dry run's own, or seen through another output)
            seen.add(id(waiting))
            for position, (where, index) in enumerate(places):
                if where is items:
                    found.append((index, places, position))
        return found

    def restart(self, tensors: Iterable[torch.Tensor]) -> None:
        """Tensors written in place: their next edges go to a new history. A view written
        in place (``out[:, 0] = out[:, 6]``, ``F.pad``'s circular mode) writes its base
        too: autograd gives the base a new node (``CopySlices``), so the base's next edges
        (the next slice read from it) go to a new history as well."""
        self._check_pass()
        for tensor in tensors:
            base = tensor._base
            for written in (tensor,) if base is None else (tensor, base):
                ref = weakref.ref(written)
                self.histories[ref] = self.histories.get(ref, 0) + 1

    def _read_off(self, tensor: torch.Tensor) -> None:
        found = self.waiting.get(id(tensor))
        if found is not None and found.ref() is tensor and not quiet.on:
            found.observed = True  # (no backward from it if it is let go; held, a result)

    def _let_go(self, key: int, _: object = None) -> None:
        # (an output let go, read by no op: inside the function costed, a dead value, as
        # `_` in `out, _ = attention(x, x, x)`; in a record's own code, a result dropped,
        # which a backward through it would have reached)
        self._check_pass()
        found = self.waiting.get(key)
        if found is not None and found.ref() is None:
            del self.waiting[key]
            waiting = found.waiting
            if not found.inert:
                waiting.alive -= 1
            # (dead: read by nothing, no backward starts from it; in a record's own code
            # too where another output of its op that a gradient flows through is held:
            # `torch.var_mean(x, 1)[1]`)
            own = not (self.inside() or self.internal() or found.inert or self.elsewhere())
            if not own or waiting.alive > 0 or found.observed:
                found.off = True
            if own and waiting.count > 1 and not waiting.read:
                for output in dropped_unread(found):  # (see .outputs_reached)
                    self._gone(output)
                if waiting.dropped:
                    self.gone.append(found)  # (decided when the others are, or at settle)
            else:
                self._gone(found)

    def _gone(self, found: WaitingOutput) -> None:
        if found.copies > 0:  # (until a copy is read or gone)
            found.let_go = True
            self.gone.append(found)
            if len(self.gone) > self._gone_limit:
                self.gone = [output for output in self.gone if not output.done]
                self._gone_limit = max(TRIM, 2 * len(self.gone))
        else:
            self._decide(found)

    def _decide(self, output: WaitingOutput, boundary: bool = False) -> None:
        """An output let go, or held where a call begins or returns or the run ends: a
        backward may start from it unless it is ``off`` (or let go, read aside); then it
        reaches backward only if an op that differentiates it does."""
        if output.done or output.rootless:
            return
        if not (output.off or output.inert or (output.observed and output.let_go)):
            if not self.histories or not self._stale(output.ref(), output.viewed):
                output.done = True
                reach(output)
                if boundary:
                    hold(self, output)  # (a view's edge: see .held_views)
                else:
                    self._live(output.waiting)  # (what a backward through it would reach)
                return
            output.off = True  # (a backward from it starts at the node it is made again)
        output.rootless = True
        if output.readers <= 0:
            self._dead(output)
        else:
            self.gone.append(output)  # (its op's edges wait: see _prune)

    def _live(self, waiting: Waiting) -> None:
        """An op reaches backward: count its edges, and so do the ops that made what it
        read."""
        stack, reached = [waiting], []
        while stack:
            found = stack.pop()
            if found.inputs is None:
                continue  # (decided)
            inputs, sources = found.inputs, found.sources
            if found.split is not None:  # (its outputs' edges differ: see .outputs_reached)
                if found.open > 0:
                    found.wanted = True  # (once its last output is decided)
                    continue
                inputs, sources, dropped = kept(found)
                for source in dropped:
                    source.readers -= 1
                    if source.readers <= 0 and source.rootless:
                        self._dead(source)
            reached.append((found, inputs))
            found.inputs = None
            for source in sources:
                if not source.done:
                    source.done = True
                    reach(source)
                    stack.append(source.waiting)
            found.sources = []
        if len(reached) > 1:  # (in the order the ops ran: a sum falls to the later edge)
            reached.sort(key=lambda pair: pair[0].serial)
        for found, inputs in reached:
            for edge in inputs:
                self._add(edge, 1, found.context)
            if found.again is not None:  # (a view made again: its own backward)
                self._hand(found.again, found.context)
        if len(self.uses) > self._uses_limit:  # (once every edge reached is counted: one
            self._prune()  # not yet counted may go to a tensor let go)

    def _dead(self, output: WaitingOutput) -> None:
        """No backward reaches ``output``: if no other output of its op is reached, the op
        costs no backward, and the ops that made what it read lose a reader."""
        stack, wanted = [output], []
        while stack:
            found = stack.pop()
            if found.done:
                continue
            found.done = True
            if died(found) and found.waiting.wanted:
                wanted.append(found.waiting)  # (its last output decided: see _live)
            waiting = found.waiting
            waiting.left -= 1
            if waiting.left > 0 or waiting.inputs is None:
                continue
            if self.reads.saved:  # (a backward building a graph may yet reach it)
                lose(self.reads, waiting, waiting.inputs)
            waiting.inputs = None
            off_graph(waiting)
            for source in waiting.sources:
                source.readers -= 1
                if source.readers <= 0 and source.rootless:
                    stack.append(source)
                elif source.readers <= 0 and not (source.saved or source.let_go):
                    source.off = False  # (held, its readers gone: a result again)
                    self._note_base(source)
            waiting.sources = []
        for waiting in wanted:
            self._live(waiting)

    def _check_pass(self) -> None:
        if self._pass != PASSES[0]:
            # a backward ran: what waits is decided first, as held (the graph it walked),
            # then the next forward's edges count from zero
            self._pass = PASSES[0]
            self.settle(started=True)
            self.held_views.clear()
            self.view_parents.clear()
            self.credits.clear()
            self.reads.clear()
            self.uses.clear()
            self.histories.clear()
            self.made.clear()

    def _prune(self) -> None:
        # (a tensor let go keeps its count while an edge to it waits)
        outputs = (*self.waiting.values(), *self.gone)
        waits = {edge[0] for output in outputs for edge in output.waiting.inputs or ()}
        kept = self.reads.prune()
        self.uses = {
            key: value
            for key, value in self.uses.items()
            if key[0]() is not None or key[0] in waits or key[0] in kept
        }
        self.histories = {ref: n for ref, n in self.histories.items() if ref() is not None}
        self.made = {ref: n for ref, n in self.made.items() if ref() is not None}
        self._uses_limit = max(TRIM, 2 * len(self.uses))


_Tensor = torch.Tensor
_CLONE = torch.ops.aten.clone.default
