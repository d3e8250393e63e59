"""The peak of a training step's allocations, from a run of its forward and backward on
``meta``.

Every op that makes a new storage adds its bytes; a storage is taken off when nothing
holds it any more (autograd frees what it saved as backward goes, gradients stay): the
largest sum is the step's peak above what was allocated before it, as a CPU's allocator
or ``torch.cuda.max_memory_allocated`` would see it (a CUDA allocator rounds each block up
to 512 bytes). Meta tensors have no data, so a model of any size runs in seconds.

Two things the dispatcher does not show as they happen without it are put right: backward
formulas fill the zeros they make in place (``index``, ``index_select``, ``gather``,
``take``), where under a dispatch mode they take their out-of-place branch; and a matrix
product copies an input BLAS cannot take as laid out (an expanded gradient, a strided
slice) inside its kernel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..config import disabled
from ..cost.engine.kernels import TargetKernels, meta_target
from ..cost.engine.probes import estimate_probe
from ..decorator import TypedFunction

__all__ = ["ZEROS", "LiveBytes", "copied_bytes", "fills_zeros", "forward_backward_peak"]


#: Ops backward makes zeros with before a lookup fills them (see :func:`fills_zeros`).
ZEROS = {torch.ops.aten.new_zeros, torch.ops.aten.zeros_like, torch.ops.aten.zeros}


def fills_zeros(zeros: int, args: tuple[Any, ...], out: Any) -> bool:
    """Whether an op's result is its first argument, the storage ``zeros``, filled out of
    place: a tensor of the same bytes in a storage of its own."""
    first = args[0] if args else None
    if not isinstance(first, torch.Tensor) or not isinstance(out, torch.Tensor):
        return False
    made, result = first.untyped_storage(), out.untyped_storage()
    return made._cdata == zeros and result._cdata != zeros and result.nbytes() == made.nbytes()


#: Matrix products and the positions of their matrix arguments.
_MATRICES = {
    torch.ops.aten.mm: (0, 1),
    torch.ops.aten.bmm: (0, 1),
    torch.ops.aten.addmm: (1, 2),
    torch.ops.aten.baddbmm: (1, 2),
}


def _blas_ready(matrix: torch.Tensor) -> bool:
    """Whether BLAS takes ``matrix`` (its last two axes) as it is laid out: row-major or
    column-major with a leading stride at least the row or column (cuBLAS's and the CPU's
    test). Else the kernel multiplies a contiguous copy (an expanded gradient, a slice)."""
    rows, cols = matrix.shape[-2:]
    row_stride, col_stride = matrix.stride()[-2:]
    return (col_stride == 1 and row_stride >= max(1, cols)) or (
        row_stride == 1 and col_stride >= max(1, rows)
    )


def copied_bytes(func: Any, args: tuple[Any, ...], device_type: str) -> int:
    """Bytes a matrix product copies inside its kernel, invisible to the dispatcher: each
    matrix argument BLAS cannot take as laid out, whole on CUDA, one matrix of a batch at a
    time on a CPU."""
    positions = _MATRICES.get(func.overloadpacket, ())
    copied = 0
    for position in positions:
        matrix = args[position] if position < len(args) else None
        if isinstance(matrix, torch.Tensor) and not _blas_ready(matrix):
            numel = matrix.numel() if device_type == "cuda" else matrix.shape[-2:].numel()
            copied += numel * matrix.element_size()
    return copied


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

    def __init__(self, device_type: str = "cpu") -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.device_type = device_type  # whose kernels' copies count: "cpu" or "cuda"
        self.storages: dict[int, tuple[StorageWeakRef, int]] = {}
        self._live = 0  # can count storages freed since the last look: never too low
        self.peak = 0
        self._zeros: int | None = None  # the storage of zeros backward has just made

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
        if self._zeros is not None and fills_zeros(self._zeros, args, out):
            # Backward made zeros and fills them out of place, as its formulas do for tensor
            # subclasses and under a mode like this one (``isTensorSubclassLike``); without a
            # mode they fill the zeros in place (index, index_select, gather, take): the
            # zeros' bytes become the result's.
            _, size = self.storages.pop(self._zeros)
            self._live -= size
        self._zeros = None
        if func.overloadpacket in ZEROS and torch._C._current_autograd_node() is not None:
            self._zeros = out.untyped_storage()._cdata
        inputs = {storage._cdata for storage in _storages((args, kwargs))}
        for storage in _storages(out):
            key = storage._cdata
            if key not in self.storages and key not in inputs:  # not a view, not in place
                size = storage.nbytes()
                self.storages[key] = (StorageWeakRef(storage), size)  # type: ignore[no-untyped-call]
                self._live += size
        # A kernel's own copies live while it runs, after its result is made.
        copied = copied_bytes(func, args, self.device_type)
        if self._live + copied > self.peak:
            # The count still holds storages freed since the last look: it can only be too
            # high, so only a new peak is looked at closely.
            self.peak = max(self.peak, self.live + copied)
        return out

    def _drop_freed(self) -> None:
        freed = [
            key
            for key, (ref, _) in self.storages.items()
            if ref.expired()  # type: ignore[no-untyped-call]
        ]
        for key in freed:
            self._live -= self.storages.pop(key)[1]


def _backward_roots(result: Any) -> list[torch.Tensor]:
    """What a training step differentiates in ``result``: its scalars that require grad
    (the loss of ``logits, loss = model(x, targets)``), else every tensor that does."""
    tensors = [
        value
        for value in tree_flatten(result)[0]
        if isinstance(value, torch.Tensor) and value.requires_grad
    ]
    return [tensor for tensor in tensors if tensor.dim() == 0] or tensors


def forward_backward_peak(
    function: TypedFunction[..., Any],
    model: torch.nn.Module,
    dtype: torch.dtype,
    dims: Mapping[str, Any],
) -> int:
    """Bytes at the peak of ``function(model, ...)`` (a typed ``loss`` or ``forward``) and
    its backward, run on ``meta`` at ``dims`` with its tensors in ``dtype``, above the
    model's parameters; the gradients it makes are counted. Backward starts from the loss
    the function returns, alone or in a tuple, else from the sum of what it returns, which
    is held through backward (as ``out = model(x); out.sum().backward()`` holds it).
    Attention runs the kernel of the device the dry runs cost, and matrix products count
    the copies that device's kernels make of inputs BLAS cannot take.
    """
    probe = estimate_probe(function, (model,), dims, dtype, ())
    target = meta_target() if probe.device == "meta" else probe.device
    kernels = TargetKernels(target) if target is not None else contextlib.nullcontext()
    with torch.device("meta"), disabled():
        thunk: Callable[[], Any] = probe.build(probe.dims, "meta")
        tracker = LiveBytes(torch.device(target).type if target is not None else "cpu")
        with kernels, tracker:
            result = thunk()
            roots = _backward_roots(result)
            if roots:
                torch.autograd.backward([root if root.dim() == 0 else root.sum() for root in roots])
            del result, roots
    return tracker.peak
