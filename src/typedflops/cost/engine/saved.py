"""What autograd saves for backward in a dry run: the activation bytes, each storage once.

:class:`SavedTensors` is a pair of ``saved_tensors_hooks``: every tensor autograd keeps is
noted by its storage (a view and its base are one storage), with the decorated call that
owned the op (see :func:`.frames.owner`). Parameters (leaves that require grad) are not
activations and are left out. A block repeated in a dry run whose body is not run again
(see :mod:`.calls`) adds copies of what its first call saved.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .events import Event, saved_event
from .frames import Frame, owner
from .tensors import TensorMeta, describe
from .waits import reads_unseen

__all__ = ["SavedEntry", "SavedTensors", "in_checkpoint", "recomputing", "top_pack_hook"]

_copies = itertools.count()


def top_pack_hook() -> Any:
    """The pack function of the saved-tensor hooks autograd calls now (None if none)."""
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(False)
    return None if hooks is None else hooks[0]


def in_checkpoint() -> bool:
    """Whether ops run in the forward of a ``torch.utils.checkpoint`` region (the default,
    non-reentrant kind): what they save is dropped, and they run again during backward.

    Known by the hooks such a region installs (torch names their pack function
    ``_checkpoint_hook.__init__.<locals>.pack_hook``).
    """
    pack = top_pack_hook()
    return pack is not None and "_checkpoint_hook" in getattr(pack, "__qualname__", "")


def recomputing() -> bool:
    """Whether ops run as a ``torch.utils.checkpoint`` region's forward again, during
    backward (torch names the hooks it saves them with ``_recomputation_hook``)."""
    pack = top_pack_hook()
    return pack is not None and "_recomputation_hook" in getattr(pack, "__qualname__", "")


#: The attribute of a saved copy naming the tensor it was saved for (weakly).
_ORIGINAL = "_typedflops_saved_for"


def _place(tensor: torch.Tensor) -> tuple[Any, ...]:
    """Where a tensor's values lie: its storage, offset, shape, strides and dtype."""
    return (
        tensor.untyped_storage()._cdata,
        tensor.storage_offset(),
        tuple(tensor.shape),
        tensor.stride(),
        tensor.dtype,
    )


@dataclass(frozen=True)
class SavedEntry:
    """One storage kept for backward: its bytes, its base tensor's metadata, its owner."""

    nbytes: int
    base: TensorMeta
    frame: Frame | None
    origin: SavedEntry | None = None  # the entry of a repeated block's first call it copies


class SavedTensors:
    """``saved_tensors_hooks`` that note each storage autograd keeps for backward."""

    def __init__(self) -> None:
        self.entries: dict[Any, SavedEntry] = {}
        # Every storage noted or passed over, in order, with repeats: what one call saved.
        self.log: list[Any] = []
        # Storages are kept alive while the run lasts: a freed storage's address could be
        # reused by another, which would then be taken for one already seen.
        self._alive: list[Any] = []
        self.weights: set[Any] = set()
        # Leaves standing for a skipped body's result: activations, although leaves.
        self.stand_ins: set[Any] = set()
        # The tensors needing grad that autograd saved (weakly; kept while the run lasts),
        # and those a backward building a graph unpacked, by where their values lie:
        # autograd unpacks a new tensor with the original's node (see :meth:`original_of`).
        self.saved_for: set[weakref.ref[torch.Tensor]] = set()
        # Told of each tensor needing grad saved (the run's gradient sums: see .saved_reads).
        self.on_save: Callable[[torch.Tensor, weakref.ref[torch.Tensor]], None] | None = None
        self.unpacked: dict[Any, weakref.ref[torch.Tensor]] = {}

    @staticmethod
    def key(tensor: torch.Tensor) -> Any:
        """The identity of a tensor's storage."""
        return tensor.untyped_storage()._cdata

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        with reads_unseen():  # (its detach is no read of the user's: see .fan_in)
            kept = self._pack(tensor)
        if tensor.requires_grad:  # (what a backward building a graph unpacks: see below)
            ref = weakref.ref(tensor)
            kept.__dict__[_ORIGINAL] = ref
            self.saved_for.add(ref)
            if self.on_save is not None:
                self.on_save(tensor, ref)
        return kept

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        # Kept detached (autograd gives an output its grad_fn back when unpacking): an output
        # kept as it is would hold its own grad_fn, a cycle through autograd's nodes that no
        # garbage collection frees, so every dry run's graph would outlive it.
        storage = tensor.untyped_storage()
        key = storage._cdata
        self.log.append(key)
        if key in self.entries or key in self.weights:
            return tensor.detach()
        base = tensor._base if tensor._base is not None else tensor
        if base.is_leaf and base.requires_grad and key not in self.stand_ins:
            self.weights.add(key)  # a parameter (or an input needing grad), not an activation
            return tensor.detach()
        self._alive.append(storage)
        self.entries[key] = SavedEntry(int(storage.nbytes()), describe(base), owner())
        return tensor.detach()

    def unpack(self, tensor: torch.Tensor) -> torch.Tensor:
        found = tensor.__dict__.get(_ORIGINAL)
        if found is not None and torch.is_grad_enabled():  # (a backward building a graph)
            self.unpacked[_place(tensor)] = found
        return tensor

    def original_of(self, tensor: torch.Tensor) -> weakref.ref[torch.Tensor] | None:
        """The tensor autograd saved (its weak reference, the tensor perhaps let go since)
        where ``tensor`` is the copy of it that a backward run with ``create_graph=True``
        unpacked: a new Python tensor on the same node of the graph (an edge to either is
        an edge to one tensor, whose gradients autograd sums); else None."""
        if not self.unpacked or not tensor.requires_grad:
            return None
        found = self.unpacked.get(_place(tensor))
        if found is None:
            return None
        kept = found()
        if kept is tensor or (kept is not None and kept.grad_fn is not tensor.grad_fn):
            return None
        return found

    def active(self) -> bool:
        """Whether these hooks are the ones autograd calls now (not a checkpoint's)."""
        return getattr(top_pack_hook(), "__self__", None) is self

    def mark(self) -> int:
        """A point in the run (see :meth:`since`)."""
        return len(self.log)

    def since(self, mark: int) -> list[tuple[Any, SavedEntry]]:
        """The activation storages saved after :meth:`mark` returned ``mark``, in order,
        each once (also those noted before it, and copies noted by :meth:`add`)."""
        keys = dict.fromkeys(key for key in self.log[mark:] if key in self.entries)
        return [(key, self.entries[key]) for key in keys]

    def leaves_since(self, mark: int) -> list[Any]:
        """The storages of leaves that require grad (parameters, inputs) saved after
        :meth:`mark` returned ``mark``: not activations here, but a repeat given an
        activation in their place saves it."""
        return list(dict.fromkeys(key for key in self.log[mark:] if key in self.weights))

    def add(self, tensor: torch.Tensor | None, entry: SavedEntry) -> None:
        """Note the storage of ``tensor`` (a copy of one a repeated block's first call
        saved), unless noted already; a storage of its own when ``tensor`` is None."""
        if tensor is None:
            key = ("copy", next(_copies))
            self.entries[key] = entry
            self.log.append(key)
            return
        storage = tensor.untyped_storage()
        key = storage._cdata
        self.log.append(key)
        if key not in self.entries and key not in self.weights:
            self._alive.append(storage)
            self.entries[key] = entry

    def events(self) -> list[Event]:
        """One event per activation storage: its bytes as the count, its tensor's shape."""
        found: list[Event] = []
        by_entry: dict[int, Event] = {}
        for key, entry in self.entries.items():
            if key in self.weights:
                continue
            frame = entry.frame
            event = saved_event(
                entry.base,
                entry.nbytes,
                () if frame is None else frame.path,
                () if frame is None else frame.calls,
            )
            if entry.origin is not None:
                event.origin = by_entry.get(id(entry.origin))
            by_entry[id(entry)] = event
            found.append(event)
        return found
