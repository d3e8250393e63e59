"""The torch modes that turn the ops a body runs into events.

:class:`CountingMode` is a ``TorchDispatchMode``: it sees every ``aten`` kernel call as it
ran (after autograd, composite ops already decomposed), the level at which
``FlopCounterMode`` counts, and mirrors its handling (metadata ops passed on, ops without a
rule decomposed when they can be). :class:`GroupingMode` is a ``TorchFunctionMode`` that only
names what the user called (``matmul``, ``linear``, ``softmax``): the events of one such call
form one row of a cost breakdown. Neither is active outside ``record()``, ``estimate()`` and
formula fitting, and typedflops' own contract checks run with both out of the way.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)
from torch.autograd.function import BackwardCFunction
from torch.nested._internal.nested_tensor import NestedTensor
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from ...contract.walk import tensors_in
from .body_backward import ran_in_body_backward
from .custom_ops import generated_for_custom_op
from .device_runs import RUNS, stands_for
from .distributed import in_sharding_propagation, is_dtensor_call, training_hook
from .edges import edges_of, written, written_arguments
from .events import Event, Sink, named_event
from .fan_in import GradientSums
from .fast_path import fast_path_off
from .frames import current_frame, no_frame
from .function_backward import StandIns, dispatch_keys, is_real, map_tensors, split_reruns
from .function_inputs import FunctionCall, function_op
from .functions import inside_rule, watching
from .grouping import GroupingMode
from .index_bounds import check_bounds
from .known_values import READS as VALUE_READS
from .known_values import SHAPED_BY_VALUES, KnownValues
from .meta_outputs import cached_outputs, keep_outputs, meta_key
from .op_events import make_event, requires_backward
from .opaque_nodes import opaque_backward
from .rules import FREE, find_rule, op_name
from .run_again import RunAgain, region_frame
from .skip_dynamo import keep_dynamo_out
from .value_checks import answer
from .value_rules import VALUE_COUNTED, unknown_values
from .waits import Place

__all__ = [
    "CountingMode",
    "GroupingMode",
    "count_custom_backwards",
    "counting",
    "custom_backward_event",
    "paused",
    "suspended",
]


_METADATA = {
    torch.ops.aten.sym_is_contiguous.default,
    torch.ops.aten.is_contiguous.default,
    torch.ops.aten.is_contiguous.memory_format,
    torch.ops.aten.is_strides_like_format.default,
    torch.ops.aten.is_non_overlapping_and_dense.default,
    torch.ops.aten.size.default,
    torch.ops.aten.sym_size.default,
    torch.ops.aten.stride.default,
    torch.ops.aten.sym_stride.default,
    torch.ops.aten.storage_offset.default,
    torch.ops.aten.sym_storage_offset.default,
    torch.ops.aten.numel.default,
    torch.ops.aten.sym_numel.default,
    torch.ops.aten.dim.default,
    torch.ops.prim.layout.default,
}
_PASS_ON = {torch.ops.prim.device.default}

# Dense to sparse: the result holds one value (or block) per nonzero of the input.
_SPARSE_FROM_DENSE = {
    getattr(torch.ops.aten, name)
    for name in (
        "_to_sparse",
        "_to_sparse_csr",
        "_to_sparse_csc",
        "_to_sparse_bsr",
        "_to_sparse_bsc",
    )
}


_CLONE = torch.ops.aten.clone.default


def follow_materialized(source: Any, out: Any) -> None:
    """A conjugate (or negative) view copied into a tensor of its own below autograd (the
    fallback torch runs before an op that takes no such view: ``x * y.conj()``, an FFT of
    a conjugate) hands the op a copy that needs no gradient, where autograd differentiates
    the op for the view: the copy takes the view's need, so the op's backward is seen."""
    if (
        type(source) is torch.Tensor
        and source.requires_grad
        and (source.is_conj() or source.is_neg())
        and isinstance(out, torch.Tensor)
        and not out.requires_grad
        and torch.is_grad_enabled()
    ):
        out.requires_grad_(True)


def _without_values(tensor: Any) -> bool:
    """Whether ``tensor`` is a strided tensor of a dry run (meta or fake: no values)."""
    return (
        isinstance(tensor, torch.Tensor)
        and tensor.layout is torch.strided
        and (tensor.is_meta or isinstance(tensor, FakeTensor))
    )


_saved_hooks = torch._C._autograd._top_saved_tensors_default_hooks
_forward_ad = torch._C._is_fwd_grad_enabled


class CountingMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts every ``aten`` op into ``sink``.

    In the ``"forward"`` phase, ops that autograd runs during a backward pass are passed on
    uncounted: backward is accounted per forward op (see :mod:`.backward`), so a user's
    ``loss.backward()`` inside ``record()`` is not counted twice.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # (kept out on first use instead: see .skip_dynamo)

    def __init__(self, sink: Sink, phase: str = "forward") -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.sink = sink
        self.phase = phase
        self.paused = False
        self.grouping: GroupingMode | None = None
        # A dry run on meta tensors for a call that would run on this device type: its
        # attention takes the kernel that device would pick (see .attention).
        self.target: str | None = None
        # In a dry run on meta tensors, a real tensor the body reaches (a global module's
        # weight, a closure's constant) takes part through a meta copy, made once per
        # tensor, as FakeTensorMode(allow_non_fake_inputs=True) converts real tensors to
        # fake ones: the op runs on meta and nothing real is read or written.
        self.to_meta = False
        self.meta_copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # In a dry run, the values of the meta tensors that shapes fix (see .known_values);
        # in one under FakeTensorMode, those of its fake tensors, for index bounds alone.
        self.known: KnownValues | None = None
        self.bounds: KnownValues | None = None
        # The autograd.Function nodes whose backward is counted already.
        self.custom_nodes: weakref.WeakSet[Any] = weakref.WeakSet()
        # The dispatch keys outside the mode, for a Function's backward counted inside it.
        self.keys = dispatch_keys()
        # The ops of checkpointed regions that backward runs again (see .run_again).
        self.again = RunAgain(sink.add)
        # The sums of gradients where a tensor feeds several differentiated ops.
        self.sums = GradientSums(sink)
        # The torch.autograd.Function whose forward ran the last op with autograd off.
        self.function: FunctionCall | None = None

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in _METADATA:
            return NotImplemented  # as FlopCounterMode: a subclass (a nested tensor) answers
        if self.paused or func in _PASS_ON or not isinstance(func, torch._ops.OpOverload):
            return func(*args, **kwargs)
        if self.phase == "forward" and (node := torch._C._current_autograd_node()) is not None:
            return ran_in_body_backward(self, node, func, args, kwargs)
        if is_dtensor_call(types):
            return NotImplemented  # DTensor runs it as this rank's local ops, counted then
        if in_sharding_propagation():
            return func(*args, **kwargs)  # DTensor's pass over global shapes: not this rank's
        if self.to_meta and _returns_tensor(func):  # (a query such as an SDPA choice: as is)
            args, kwargs = self._on_meta(args, kwargs, bool(written_arguments(func)))
        if _JAGGED in types:
            # A jagged tensor runs each op on its dense values: count those. Its backward
            # runs on jagged tensors, which no replay builds: named, not predicted.
            if requires_backward(args, kwargs) and find_rule(func) is not FREE:
                self.sink.add(named_event(f"{op_name(func)} (backward, jagged)"))
            with self, torch.no_grad():
                return _JAGGED.__torch_dispatch__(func, types, args, kwargs)  # type: ignore[no-untyped-call]
        known = self.known
        if func in VALUE_COUNTED and unknown_values(func, known, args, kwargs):
            raise DynamicOutputShapeException(func)  # (see .value_rules, .grouped_rules)
        if func._overloadpacket in _SPARSE_FROM_DENSE and _without_values(args[0]):
            # (its number of values is the number of nonzeros: meta would give none)
            raise DynamicOutputShapeException(func)
        if known is not None and (func in VALUE_READS or func in SHAPED_BY_VALUES):
            answered, value = answer(func, args) if func in VALUE_READS else (False, None)
            counted = args
            if not answered:  # (values known from shapes: see .known_values)
                answered, value, counted = known.read(func, args, kwargs)
            if answered:  # (or a check's value known from shapes: see .value_checks)
                self._counted(func, find_rule(func), counted, kwargs, value)
                return value
        bounds = known if known is not None else self.bounds
        if bounds is not None:
            check_bounds(func, args, bounds.of)  # (where a real run would raise)
        found = find_rule(func)
        if found is None:
            key = _nested_key(args, kwargs)
            if key is not None and func.has_kernel_for_dispatch_key(key):
                # torch's Python decompositions do not know nested tensors (a nested
                # matmul pads its rows): run the nested kernel, counting the ops it runs
                with self:
                    return func._op_dk(key, *args, **kwargs)
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        key = meta_key(func, args, kwargs)
        if key is not None and func in RUNS:  # (run as the device stood for runs it)
            key = (*key, stands_for())
        out = None if key is None else cached_outputs(key)
        if out is None:
            out = RUNS.get(func, func)(*args, **kwargs)
            if key is not None:
                keep_outputs(key, out)
        if bounds is not None:
            bounds.after(func, args, kwargs, out)
        if func is _CLONE:
            follow_materialized(args[0], out)
        self._counted(func, found, args, kwargs, out)
        return out

    def _counted(
        self, func: Any, found: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        """Count an op that ran (or was answered) and what it adds to backward."""
        event = make_event(func, found, args, kwargs, out)
        if inside_rule():
            event.flops = 0  # a registered Python function's rule gives its count
        self.sink.add(event)
        again = self.again
        if again.regions or _saved_hooks(False) is not None:
            again.op(event, region_frame())
        self.edges(event, func, args, kwargs, out)

    def edges(
        self, event: Event, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        """What an op that ran adds to backward besides its own: the backward of each
        ``torch.autograd.Function`` it takes an output of, and the sums of gradients of the
        tensors it makes an edge to (see :mod:`.fan_in`)."""
        inside = False
        # (with autograd off but forward AD on, as under torch.no_grad(), no Function's
        # forward runs: see .function_inputs)
        if self.phase == "forward" and (
            self.function is not None
            or not (event.needs_grad or torch.is_grad_enabled() or _forward_ad())
        ):
            self.function, inside = function_op(self.sums, self.function, event, args, kwargs, out)
        if event.needs_grad or inside:  # (a Function reading another's output: its edge)
            self._custom_backwards(args, kwargs)
        if self.phase != "forward":  # (a backward's ops: their own graph is not costed)
            return
        writes = written(func, args, kwargs) if written_arguments(func) else []
        if inside:
            pass  # (its reads and outputs are the Function's: see .function_inputs)
        elif event.needs_grad:
            self.sums.op(
                edges_of(event, self.keys, args, kwargs),
                args,
                kwargs,
                out,
                event,
                self.places(event),
                writes,
            )
        elif self.sums.waiting:
            self.sums.read(args, kwargs)
        if writes:
            self.sums.restart(writes)

    def places(self, event: Event) -> list[Place] | None:
        """Where a record keeps ``event`` (None: a dry run's own event)."""
        return None

    def _on_meta(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], writes: bool
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments with every real tensor replaced by its meta copy. A CPU scalar,
        which mixes with meta tensors and whose value ``.item()`` may read, is kept, unless
        the op writes to an argument: nothing real is written in a dry run."""
        if not any(is_real(t, writes) for t in tensors_in((args, kwargs))):
            return args, kwargs

        def copy(tensor: torch.Tensor) -> torch.Tensor:
            return self._meta_copy(tensor) if is_real(tensor, writes) else tensor

        return map_tensors(args, copy), {
            key: map_tensors(value, copy) for key, value in kwargs.items()
        }

    def on_meta(self, tree: Any, scalars: bool = False) -> Any:
        """A decorated call's arguments or value in a dry run on meta tensors (``tree``:
        tensors, in lists, tuples and dicts): each real tensor as the meta copy its ops
        take, so that the call's checks see the one device its ops run on; a CPU scalar,
        which ops keep (its value may be read), only with ``scalars`` (for the checks)."""
        if not self.to_meta or not any(is_real(t, scalars) for t in tensors_in(tree)):
            return tree
        with _disable_current_modes():  # (making a copy is no op of the body's)
            return map_tensors(tree, lambda t: self._meta_copy(t) if is_real(t, scalars) else t)

    def _meta_copy(self, tensor: torch.Tensor) -> torch.Tensor:
        known = self.meta_copies.get(id(tensor))
        if known is not None and known[0] is tensor:
            return known[1]
        copy = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta")
        if tensor.requires_grad and (copy.is_floating_point() or copy.is_complex()):
            copy.requires_grad_(True)
        self.meta_copies[id(tensor)] = (tensor, copy)  # the original kept: ids stay unique
        if self.known is not None:
            self.known.copied(tensor, copy)
        return copy

    def _custom_backwards(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Count, once per call, the backward of each ``torch.autograd.Function`` whose
        output an op takes (see :func:`custom_backward_event`)."""
        for tensor in tensors_in((args, kwargs)):
            self.custom_backward(tensor.grad_fn)

    def custom_backward(self, node: Any) -> None:
        """Count the backward of ``node`` if it is a ``torch.autograd.Function``'s not
        counted yet (``torch.library`` custom ops excepted: a replay counts theirs; and
        the hooks of FSDP2 and DDP, which hand gradients on, see :func:`training_hook`)."""
        if not isinstance(node, BackwardCFunction):
            return opaque_backward(self.sink, node)
        cls = node._forward_cls  # type: ignore[attr-defined]
        if generated_for_custom_op(cls) or training_hook(cls):
            return
        if node in self.custom_nodes:
            return
        self.custom_nodes.add(node)
        self.sink.add(custom_backward_event(node, to_meta=self.to_meta, keys=self.keys))


@functools.lru_cache(maxsize=4096)
def _returns_tensor(func: Any) -> bool:
    return any("Tensor" in str(r.type) for r in func._schema.returns)


def custom_backward_event(
    node: Any, *, to_meta: bool = False, keys: tuple[Any, Any] | None = None
) -> Event:
    """The backward of one ``torch.autograd.Function`` call, as an event with no forward
    FLOPs whose backward is what the Function's ``backward`` runs.

    Its ``backward`` is called with ``node`` as its ``ctx`` and a gradient of each output's
    shape, on fake tensors (the saved tensors and any real tensor it reaches replaced by
    stand-ins, nothing computed, no ``.grad`` of the user's written), with autograd on as
    outside any mode (``keys``: the dispatch keys there, see :mod:`.function_backward`),
    under a counting mode of its own: the dispatch modes around the call (a
    ``FlopCounterMode`` the user holds) never see these ops. A forward it runs again to
    differentiate it (reentrant checkpointing) is kept apart, as ``rerun``. When it cannot
    run so (it reads a value, ``ctx`` lacks what it needs), it is listed as uncounted, with
    the reason.
    """
    cls = node._forward_cls
    name = f"{cls.__name__} (backward)"
    sink = _ListSink()
    try:
        saved = node.saved_tensors
        real = any(is_real(t) for t in saved if isinstance(t, torch.Tensor))
        fake = FakeTensorMode(allow_non_fake_inputs=True) if real else None
        with (
            _disable_current_modes(),
            torch._C._ForceDispatchKeyGuard(*(keys or dispatch_keys())),
            no_frame(),
            fake if fake is not None else contextlib.nullcontext(),
            torch.no_grad(),
            StandIns(fake),
        ):
            grads = [
                torch.zeros(tuple(meta.shape), dtype=meta.dtype, device=meta.device)
                for meta in node._input_metadata
            ]
            with counting(sink, phase="backward") as mode:
                mode.to_meta = to_meta
                cls.backward(node, *grads)
    except Exception as exc:  # its backward cannot run on shapes alone
        reason = str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__
        return named_event(f"{cls.__name__} (backward: {reason})")
    event = named_event(name, 0)
    event.needs_grad = True
    event.backward, event.rerun = split_reruns(sink.events)
    return event


class _ListSink:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, event: Event) -> None:
        self.events.append(event)


def count_custom_backwards(result: Any, mode: Any = None) -> Any:
    """Count the backward of each ``torch.autograd.Function`` whose output is in
    ``result`` (a call's return value, which no op inside the call took), into ``mode``
    (by default the mode of the session counting now); return ``result``."""
    if mode is None:
        mode = getattr(getattr(current_frame(), "session", None), "mode", None)
    if isinstance(mode, CountingMode):
        if type(result) is torch.Tensor:  # (the usual)
            node = result.grad_fn
            if node is not None:
                mode.custom_backward(node)
        else:
            for tensor in tensors_in(result, depth=4):
                mode.custom_backward(tensor.grad_fn)
    return result


_JAGGED = NestedTensor

_NESTED_KEYS = {
    "cpu": torch._C.DispatchKey.NestedTensorCPU,
    "cuda": torch._C.DispatchKey.NestedTensorCUDA,
    "meta": torch._C.DispatchKey.NestedTensorMeta,
}


def _nested_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The dispatch key of the nested-tensor kernels for these arguments, if any is nested."""
    for tensor in tensors_in((args, kwargs)):
        if tensor.is_nested and type(tensor) is torch.Tensor:
            return _NESTED_KEYS.get(tensor.device.type)
    return None


@contextlib.contextmanager
def counting(
    sink: Sink, phase: str = "forward", target: str | None = None, *, dry: bool = False
) -> Iterator[CountingMode]:
    """Count the ops run inside the block into ``sink`` (and name them by user call);
    ``target``: the device type a meta dry run stands for; ``dry``: a dry run on meta
    tensors (a model built on meta, costed for no device in particular, is one too)."""
    keep_dynamo_out(CountingMode)
    mode = CountingMode(sink, phase)
    mode.target = target
    mode.to_meta = dry or target is not None  # a dry run on meta tensors
    mode.known = KnownValues() if mode.to_meta else None
    with fast_path_off(), mode:  # (as in a record: see .fast_path)
        if phase == "forward":
            mode.grouping = GroupingMode(mode)
            with mode.grouping, watching(sink):
                yield mode
        else:
            yield mode


@contextlib.contextmanager
def paused(mode: CountingMode | None) -> Iterator[None]:
    """Count nothing inside the block (a call whose cost is already known)."""
    if mode is None:
        yield
        return
    previous = mode.paused
    mode.paused = True
    try:
        yield
    finally:
        mode.paused = previous


@contextlib.contextmanager
def suspended(mode: CountingMode | None) -> Iterator[None]:
    """Take the counting modes out of torch's mode stacks inside the block, so that the ops
    run at full speed (a timed run, a call whose cost is known); count nothing when they
    are not on top of the stacks (another mode entered after them)."""
    if mode is None:
        yield
        return
    dispatch_depth = torch._C._len_torch_dispatch_stack()
    functions = [
        torch._C._get_function_stack_at(index)
        for index in range(torch._C._len_torch_function_stack())
    ]
    grouping = mode.grouping
    # (a decorated call's body runs with a record's naming mode taken off: see .recording)
    grouping_on_top = grouping is not None and functions[-1:] == [grouping]
    on_top = (
        dispatch_depth > 0
        and torch._C._get_dispatch_stack_at(dispatch_depth - 1) is mode
        and (grouping_on_top or all(other is not grouping for other in functions))
    )
    if not on_top:
        with paused(mode):
            yield
        return
    dispatch = torch._C._pop_torch_dispatch_stack(None)
    lifted = torch._C._pop_torch_function_stack() if grouping_on_top else None
    try:
        yield
    finally:
        torch._C._push_on_torch_dispatch_stack(dispatch)
        if lifted is not None:
            torch._C._push_on_torch_function_stack(lifted)
