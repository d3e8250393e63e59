"""The peak of a training step's allocations, from a run of its forward and backward on
``meta``.

Every op that makes a new storage adds its bytes; a storage is taken off when nothing
holds it any more (autograd frees what it saved as backward goes, gradients stay): the
largest sum is the step's peak above what was allocated before it, as a CPU's allocator
or ``torch.cuda.max_memory_allocated`` would see it (a CUDA allocator rounds each block up
to 512 bytes). Meta tensors have no data, so a model of any size runs in seconds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ._config import disabled
from ._decorator import TypedFunction
from ._engine.kernels import TargetKernels, meta_target
from ._engine.probes import estimate_probe

__all__ = ["LiveBytes", "forward_backward_peak"]


def _storages(values: Any) -> list[torch.UntypedStorage]:
    return [v.untyped_storage() for v in tree_flatten(values)[0] if isinstance(v, torch.Tensor)]


class LiveBytes(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """While active: the bytes of the storages that ops made and that are still alive
    (``live``, counted from 0 when it starts) and the most at once (``peak``).

    >>> tracker = LiveBytes()
    >>> with tracker:
    ...     a, b = torch.ones(1000), torch.ones(2000)
    ...     del a
    ...     c = b + 1
    >>> tracker.peak, tracker.live
    (16000, 16000)
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.storages: dict[int, tuple[StorageWeakRef, int]] = {}
        self._live = 0  # can count storages freed since the last look: never too low
        self.peak = 0

    @property
    def live(self) -> int:
        """Bytes of the storages made while active that are still alive."""
        self._drop_freed()
        return self._live

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {storage._cdata for storage in _storages((args, kwargs))}
        for storage in _storages(out):
            key = storage._cdata
            if key not in self.storages and key not in inputs:  # not a view, not in place
                size = storage.nbytes()
                self.storages[key] = (StorageWeakRef(storage), size)  # type: ignore[no-untyped-call]
                self._live += size
        if self._live > self.peak:
            # The count still holds storages freed since the last look: it can only be too
            # high, so only a new peak is looked at closely.
            self.peak = max(self.peak, self.live)
        return out

    def _drop_freed(self) -> None:
        freed = [
            key
            for key, (ref, _) in self.storages.items()
            if ref.expired()  # type: ignore[no-untyped-call]
        ]
        for key in freed:
            self._live -= self.storages.pop(key)[1]


def forward_backward_peak(
    function: TypedFunction[..., Any],
    model: torch.nn.Module,
    dtype: torch.dtype,
    dims: Mapping[str, Any],
) -> int:
    """Bytes at the peak of ``function(model, ...)`` (a typed ``loss`` or ``forward``) and
    its backward (of the sum, for a result that is not a scalar), run on ``meta`` at
    ``dims`` with its tensors in ``dtype``, above the model's parameters; the gradients it
    makes are counted. Attention runs the kernel of the device the dry runs cost.
    """
    probe = estimate_probe(function, function.name, function.contract, (model,), dims, dtype, ())
    target = meta_target() if probe.device == "meta" else probe.device
    kernels = TargetKernels(target) if target is not None else contextlib.nullcontext()
    with torch.device("meta"), disabled():
        thunk: Callable[[], Any] = probe.build(probe.dims, "meta")
        tracker = LiveBytes()
        with kernels, tracker:
            result = thunk()
            if isinstance(result, torch.Tensor) and result.requires_grad:
                (result if result.dim() == 0 else result.sum()).backward()
            del result
    return tracker.peak
