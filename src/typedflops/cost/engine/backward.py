"""The backward an op's autograd runs, found by replaying the op on fake tensors.

Each forward op whose inputs require grad is replayed once per distinct signature (the op
and its arguments' shapes, strides, dtypes and ``requires_grad``) under ``FakeTensorMode``
(nothing allocated) and differentiated with ``torch.autograd.grad``; the ops autograd runs
are counted by the same rules as forward ops. So a matmul's backward is the two grad
matmuls FlopCounterMode counts, a fused attention kernel's is its backward kernel, and an
op that autograd does not differentiate costs nothing. A ``torch.autograd.Function``'s
backward, Python code that no op replay shows, is run on fake tensors when an op takes
its output (see :func:`.counter.custom_backward_event`).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .counter import counting
from .cudnn_rnn import with_weight_buffer
from .device_runs import RUNS, RunsAsDevice, stands_for
from .edges import own_saves, replay_with
from .events import Event, named_event
from .frames import no_frame
from .outputs_reached import differentiated, flowing
from .stand_ins import META_STAND_INS
from .tensors import TensorMeta, is_float, map_meta
from .value_rules import VALUE_COUNTED

__all__ = ["BackwardResult", "backward_of"]


class BackwardResult:
    """The backward events of one op signature, or why they could not be found."""

    __slots__ = ("edges", "events", "failure", "flows")

    def __init__(
        self,
        events: list[Event],
        failure: str | None = None,
        edges: tuple[int, ...] | None = None,
        flows: tuple[int, ...] | None = None,
    ) -> None:
        self.events = events
        self.failure = failure
        #: The inputs needing grad (their positions among them, in order) that the op's
        #: backward sends a gradient to: its edges in autograd's graph (None: not known).
        self.edges = edges
        #: The outputs a gradient flows through (their positions among its floating-point
        #: outputs: not a determinant's real sign, nor a layer norm's saved mean; None:
        #: not known).
        self.flows = flows

    @property
    def flops(self) -> int:
        """FLOPs of the backward ops."""
        return sum(event.flops for event in self.events)

    @property
    def uncounted(self) -> list[str]:
        """Backward ops without a rule, and the op itself if it could not be replayed."""
        found = [f"{e.op} (backward)" for e in self.events if not e.counted]
        return found if self.failure is None else [*found, self.failure]


_CACHE: OrderedDict[Any, BackwardResult] = OrderedDict()
_CACHE_SIZE = 8192
_CACHE_LOCK = threading.Lock()


class _ListSink:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, event: Event) -> None:
        self.events.append(event)


def backward_of(event: Event) -> BackwardResult:
    """The backward ops of ``event`` (cached per signature); for an event that is not an
    op (a ``torch.autograd.Function``'s backward, counted as it was seen), its own."""
    if event.func is None:
        return BackwardResult(event.backward)
    if event.func is _GROUPED_MM:  # (its count reads its groups' values: not by signature)
        return _grouped_backward(event)
    if event.func in VALUE_COUNTED:  # (its backward's work is set by values, not kept)
        return BackwardResult([], f"{event.op} (backward: its work depends on values)")
    key: Any = (event.signature, event.reached)
    if event.func in RUNS:  # (run as the device the dry run stands for runs it)
        key = (key, stands_for())
    try:
        hash(key)
    except TypeError:
        key = None
    if key is not None:
        with _CACHE_LOCK:  # (records in several threads share it)
            found = _CACHE.get(key)
            if found is not None:
                _CACHE.move_to_end(key)
                return found
    result = _replay(event)
    if key is not None:
        with _CACHE_LOCK:
            _CACHE[key] = result
            if len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
    return result


#: Ops whose backward only moves values (0 FLOPs), which a replay cannot run on meta: the
#: positions of the inputs it sends gradients to. ``_pack_padded_sequence`` needs its
#: lengths' values on a CPU; its backward puts each step's gradient back in the padded
#: batch.
_MOVES_BACK: dict[Any, tuple[int, ...]] = {
    torch.ops.aten._pack_padded_sequence.default: (0,),
}


_GROUPED_MM = torch.ops.aten._grouped_mm.default


def _grouped_backward(event: Event) -> BackwardResult:
    """A grouped product's backward: one grouped product per operand that needs grad, each
    over the same groups as the forward's, so each of the forward's FLOPs (torch's
    derivative of ``_grouped_mm``; see :mod:`.grouped_rules`). No replay: the groups are
    values, which a replay on meta has not."""
    operands = [arg for arg in event.args[:2] if isinstance(arg, TensorMeta)]
    needing = [arg for arg in operands if arg.requires_grad and is_float(arg)]
    events = []
    for _ in needing:
        grad = named_event("_grouped_mm", event.flops)
        grad.matmul_flops = event.flops
        events.append(grad)
    return BackwardResult(events, edges=tuple(range(len(needing))), flows=(0,))


def _replay(event: Event) -> BackwardResult:
    moves = _MOVES_BACK.get(event.func)
    if moves is not None:  # (its one floating-point output, the packed values, flows)
        return BackwardResult([], edges=moves, flows=(0,))
    # A CUDA kernel that meta runs as a decomposition is replayed as its stand-in.
    func = META_STAND_INS.get(event.func, event.func)
    mutates = any(
        arg.alias_info is not None and arg.alias_info.is_write for arg in func._schema.arguments
    )
    leaves: list[torch.Tensor] = []
    sink = _ListSink()
    try:
        # the dispatch modes around (a FlopCounterMode the user holds) never see a replay
        with _disable_current_modes(), torch.device("meta"), no_frame(), own_saves():

            def build(meta: TensorMeta) -> torch.Tensor:
                tensor = torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype)
                if meta.requires_grad and is_float(meta):
                    tensor.requires_grad_(True)
                    leaves.append(tensor)
                    if mutates:
                        tensor = tensor.clone()
                return tensor

            args = with_weight_buffer(func, tuple(map(_on_meta, map_meta(event.args, build))))
            kwargs = {key: _on_meta(map_meta(value, build)) for key, value in event.kwargs}
            device = RunsAsDevice() if func in RUNS else contextlib.nullcontext()
            with torch.enable_grad(), device:
                out = func(*_lists(func, args), **kwargs)
            flows = flowing(out)
            targets = differentiated(out, event.reached)
            if not targets or not leaves:
                return BackwardResult([], edges=(), flows=flows)
            seeds = [torch.ones_like(target) for target in targets]
            with counting(sink, phase="backward"):
                grads = torch.autograd.grad(targets, leaves, seeds, allow_unused=True)
    except Exception as exc:  # an op without a fake kernel or an autograd formula
        reason = str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__
        return BackwardResult(sink.events, f"{event.op} (backward: {reason})")
    edges = tuple(index for index, found in enumerate(grads) if found is not None)
    return BackwardResult(sink.events, edges=edges, flows=flows)


def _on_meta(value: Any) -> Any:
    """A device an op was given (``x.to(torch.float64)`` runs ``_to_copy(x, device=cpu)``)
    as meta: the replay runs on meta tensors."""
    return _META if isinstance(value, torch.device) else value


_META = torch.device("meta")


def _lists(func: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Arguments whose schema type is a list (``cat``'s tensors) back as lists."""
    schema = func._schema.arguments
    fixed = []
    for index, value in enumerate(args):
        if isinstance(value, tuple) and index < len(schema) and "[]" in str(schema[index].type):
            value = list(value)
        fixed.append(value)
    return tuple(fixed)


# (asked inside a dry run's dispatch: its backward events are not kept for the op's
# signature, only which inputs get a gradient)
replay_with(_replay)
