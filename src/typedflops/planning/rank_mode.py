"""One dispatch mode that watches a rank's step: FLOPs, collectives and live bytes.

- FLOPs: each local op (DTensors run as their local ops, see
  :mod:`typedflops.cost.engine.distributed`) by typedflops' rules, the conventions every
  other count follows; ops a checkpointed block runs again during backward are counted
  apart (recomputation).
- Collectives: kind, buffer bytes (:mod:`.collectives`) and the mesh dimension of their
  process group (``"tp"``, ``"dp"``).
- Live bytes: every storage an op reads or makes, at its size when last seen, so that
  FSDP's parameters, which it allocates and frees by resizing their storage, count while
  they are whole; the peak is the most at once. As :class:`~.peak.LiveBytes` does, a
  lookup's backward that fills zeros out of place under a mode is counted as filling them in
  place, and a matrix product counts the copies its kernel makes of inputs BLAS cannot take.

Each count is tagged with the phase (``forward``, ``backward``...) and, for FSDP's
collectives, the unit whose parameters they move (``"blocks.0"``, ``"stage"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..cost.engine.distributed import in_sharding_propagation, is_dtensor_call
from ..cost.engine.events import Event
from ..cost.engine.op_events import make_event
from ..cost.engine.rules import find_rule
from ..cost.engine.saved import recomputing
from .collectives import buffer_bytes, collective_kind, group_name
from .peak import ZEROS, copied_bytes, fills_zeros

__all__ = ["Count", "RankMode"]


@dataclass(frozen=True)
class Count:
    """One count of a run: ``phase``, ``tag``, ``figure`` (``"flops"``, ``"matmul_flops"``,
    ``"recompute_flops"``, or ``"all_reduce/tp"``-style for collectives) and its value."""

    phase: str
    tag: str
    figure: str
    value: int
    event: Event | None = None  # the op's, for FLOPs: its rule gives formulas


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [value for value in tree_flatten(tree)[0] if isinstance(value, torch.Tensor)]


class RankMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """While active: this rank's counts (:attr:`counts`), live bytes and their peak.

    :attr:`forced` holds the FSDP unit whose parameters FSDP gathers or reduces now (it may
    gather a block's early, in another module's hooks, to prefetch them); ``labels`` maps
    process-group names to mesh dimensions; ``device_type`` says whose matrix kernels'
    copies count (``"cuda"`` or ``"cpu"``).
    """

    def __init__(self, labels: Mapping[str, str] | None = None, device_type: str = "cuda") -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.labels = dict(labels or {})
        self.device_type = device_type
        self.phase = "forward"
        self.forced: list[str] = []
        self.counts: list[Count] = []
        self.uncounted: set[str] = set()
        #: What was taken as given where values decide the work (see .skipped_work).
        self.assumed: dict[str, None] = {}
        self.peak = 0
        self._storages: dict[int, tuple[Any, int]] = {}
        self._bound = 0  # live bytes, never below the truth (freed storages not yet dropped)
        self._zeros: int | None = None
        self._ignored: set[int] = set()

    @property
    def tag(self) -> str:
        """The tag of what runs now: the FSDP unit whose collective it is, else ``""``."""
        return self.forced[-1] if self.forced else ""

    def add(self, figure: str, value: int, event: Event | None = None) -> None:
        """Count ``value`` for ``figure`` at the current phase and tag."""
        self.counts.append(Count(self.phase, self.tag, figure, value, event))

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if is_dtensor_call(types):
            return NotImplemented  # DTensor runs it as this rank's local ops
        if in_sharding_propagation():
            return func(*args, **kwargs)  # global shapes, for metadata only
        kind = collective_kind(func)
        if kind is not None:
            out = func(*args, **kwargs)
            label = self.labels.get(group_name(args, kwargs), "other")
            self.add(f"{kind}/{label}", buffer_bytes(func, kind, args, kwargs, out))
        elif isinstance(func, torch._ops.OpOverload) and func.namespace == "aten":
            found = find_rule(func)
            if found is None:
                with self:
                    decomposed = func.decompose(*args, **kwargs)
                if decomposed is not NotImplemented:
                    return decomposed
            out = func(*args, **kwargs)
            self._count(func, found, args, kwargs, out)
        else:
            out = func(*args, **kwargs)
        self._track(func, args, kwargs, out)
        return out

    def _count(self, func: Any, found: Any, args: Any, kwargs: Any, out: Any) -> None:
        if self.phase == "optimizer":
            return  # the optimizer's step is not part of the model's FLOPs
        event = make_event(func, found, args, kwargs, out)
        if not event.counted:
            self.uncounted.add(event.op)
        if event.assumed is not None:
            self.assumed[event.assumed] = None
        if not event.flops:
            return
        again = recomputing()
        self.add("recompute_flops" if again else "flops", event.flops, event)
        if not again and event.matmul_flops:
            self.add("matmul_flops", event.matmul_flops, event)

    def _track(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        if self._zeros is not None and fills_zeros(self._zeros, args, out):
            # backward filled its zeros out of place, which it does in place without a mode
            _, size = self._storages.pop(self._zeros, (None, 0))
            self._bound -= size
        self._zeros = None
        packet = getattr(func, "_overloadpacket", None)
        if packet in ZEROS and torch._C._current_autograd_node() is not None:
            self._zeros = out.untyped_storage()._cdata
        for tensor in _tensors((args, kwargs, out)):
            storage = tensor.untyped_storage()
            key, size = storage._cdata, storage.nbytes()
            if key in self._ignored:
                continue
            known = self._storages.get(key)
            if known is None or known[1] != size:
                ref = StorageWeakRef(storage) if known is None else known[0]  # type: ignore[no-untyped-call]
                self._storages[key] = (ref, size)
                self._bound += max(0, size - (known[1] if known is not None else 0))
        copied = copied_bytes(func, args, self.device_type)
        if self._bound + copied > self.peak:
            self.peak = max(self.peak, self.live() + copied)

    def live(self) -> int:
        """Bytes of the storages seen that are alive now, at their current sizes."""
        total = 0
        for key, (ref, _) in list(self._storages.items()):
            if ref.expired():
                del self._storages[key]
                continue
            size = torch.UntypedStorage._new_with_weak_ptr(ref.cdata).nbytes()
            self._storages[key] = (ref, size)
            total += size
        self._bound = total
        return total

    def ignore(self, tensors: list[torch.Tensor]) -> None:
        """Never count ``tensors``' storages (the batch, which the step is given)."""
        self._ignored.update(t.untyped_storage()._cdata for t in tensors)

    def watch(self, tensors: list[torch.Tensor]) -> None:
        """Count ``tensors``' storages as live from now on (what the step starts with)."""
        for tensor in tensors:
            storage = tensor.untyped_storage()
            if storage._cdata not in self._storages:
                ref = StorageWeakRef(storage)  # type: ignore[no-untyped-call]
                self._storages[storage._cdata] = (ref, storage.nbytes())
        self.peak = max(self.peak, self.live())
