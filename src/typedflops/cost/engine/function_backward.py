"""What running a ``torch.autograd.Function``'s backward to count it must keep apart from the
user's tensors (see :func:`.counter.custom_backward_event`).

A Function's backward is Python code: it may build a graph and run autograd's engine in
it, as ``torch.utils.checkpoint``'s reentrant kind does (its forward again under
``enable_grad``, then ``torch.autograd.backward``). Counted on fake tensors, such a backward
needs autograd on (an op that takes a Function's output is counted inside the counting
mode's ``__torch_dispatch__``, where autograd is off: :func:`dispatch_keys` are the keys to
put back), and the graph it builds must end at stand-ins of the real tensors it reaches
(:class:`StandIns`): otherwise the engine writes fake gradients into ``.grad`` of the
user's parameters.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode

from .events import Event

__all__ = ["StandIns", "dispatch_keys", "dry_runs_own", "is_real", "map_tensors", "split_reruns"]

# Tensors a dry run made for itself with their values (a module's counters, see
# .dry_modules): ops compute on them, writes included. By id, held weakly.
_OWN: dict[int, weakref.ref[torch.Tensor]] = {}


def dry_runs_own(tensor: torch.Tensor) -> torch.Tensor:
    """Mark ``tensor``, a dry run's own copy, as one its ops may read and write."""
    if len(_OWN) > 4096:
        for key in [key for key, ref in _OWN.items() if ref() is None]:
            del _OWN[key]
    _OWN[id(tensor)] = weakref.ref(tensor)
    return tensor


def is_real(tensor: torch.Tensor, scalars: bool = False) -> bool:
    """A tensor with storage that a meta dry run must not compute on (``scalars``: CPU
    scalars too)."""
    if tensor.is_meta or isinstance(tensor, FakeTensor) or tensor.is_nested:
        return False
    if _OWN and (own := _OWN.get(id(tensor))) is not None and own() is tensor:
        return False
    if type(tensor).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
        return False  # a tensor subclass: its own dispatch decides
    if tensor.layout is not torch.strided:
        return False
    return scalars or tensor.dim() > 0 or tensor.device.type != "cpu"


def map_tensors(tree: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``tree`` (a tensor, or lists, tuples and dicts of them) with ``fn`` applied to each
    tensor."""
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a named tuple: by fields
        return type(tree)(*(map_tensors(item, fn) for item in tree))
    if isinstance(tree, list | tuple):
        return type(tree)(map_tensors(item, fn) for item in tree)
    if isinstance(tree, dict):
        return type(tree)((key, map_tensors(value, fn)) for key, value in tree.items())
    return tree


def dispatch_keys() -> tuple[Any, Any]:
    """This thread's dispatch keys as they are now (taken outside any ``__torch_dispatch__``,
    where autograd is on), to put back with ``torch._C._ForceDispatchKeyGuard``, less the
    keys of the dispatch modes on the stack: they are put back where those modes are set
    aside, and a mode on the stack then (a ``FlopCounterMode`` the user holds, a mode of
    the dry run's below its counting one) is gone, its keys with it (torch sends an op
    with them to the mode stack, empty then)."""
    return (
        torch._C._dispatch_tls_local_include_set() - _MODE_KEYS,
        torch._C._dispatch_tls_local_exclude_set(),
    )


#: The keys torch includes while a dispatch mode is on the stack.
_MODE_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Python) | torch._C.DispatchKeySet(
    torch._C.DispatchKey.PythonTLSSnapshot
)


class StandIns(TorchFunctionMode):
    """Each real tensor a torch function takes is replaced by a stand-in, made once per
    tensor, before autograd sees it: a fake tensor under ``fake`` (else a meta tensor) of its
    shape, strides and dtype that requires grad as it does. A graph built inside ends at the
    stand-ins, so a backward run inside accumulates into their ``.grad``, never the user's."""

    def __init__(self, fake: FakeTensorMode | None) -> None:
        super().__init__()
        self.fake = fake
        self.copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        args = map_tensors(args, self._stand_in)
        kwargs = {key: map_tensors(value, self._stand_in) for key, value in (kwargs or {}).items()}
        return func(*args, **kwargs)

    def _stand_in(self, tensor: torch.Tensor) -> torch.Tensor:
        if not is_real(tensor, scalars=True):
            return tensor
        known = self.copies.get(id(tensor))
        if known is not None and known[0] is tensor:
            return known[1]
        with torch._C.DisableTorchFunction():
            copy: torch.Tensor
            if self.fake is not None:
                copy = self.fake.from_tensor(tensor.detach())
            else:
                copy = torch.empty_strided(
                    tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta"
                )
            if tensor.requires_grad:
                copy.requires_grad_(True)
        self.copies[id(tensor)] = (tensor, copy)  # the original kept: ids stay unique
        return copy


def split_reruns(events: list[Event]) -> tuple[list[Event], list[Event]]:
    """A Function's backward's ops as (its backward, a forward it ran again): an op recorded
    for differentiation (``needs_grad``) outside autograd's engine is a forward run again to
    be differentiated there (reentrant checkpointing); the rest is backward."""
    backward: list[Event] = []
    rerun: list[Event] = []
    for event in events:
        if event.needs_grad:
            event.recomputed = True
            rerun.append(event)
        else:
            backward.append(event)
    return backward, rerun
