"""Standing in for the body of a block repeated in a dry run.

A dry run costs a block called again alike (the next of 96 identical layers: same function,
same module structure, same argument shapes) by copying its first call's events. Running
its body again on ``meta`` would only repeat that first call, yet costs milliseconds per op
(torch's meta kernels are mostly Python), once per layer and per run. So when the first call
returned a fresh tensor, the repeats return a stand-in of the same metadata instead, and
note what the first call saved for backward as saved again:

- a storage of one of its tensor arguments: the repeat's argument, unless already noted;
- a storage of one of its module's parameters or buffers: the repeat's module's tensor of
  that name, unless already noted;
- its result: the stand-in;
- anything else the body made: a new storage of the same size.

Inside a checkpointed region no call is repeated this way (see :func:`.calls.begin_call`):
what backward runs again depends on where each op falls among the region's saves.

A body that saves a tensor it reads from elsewhere (a global, a closure) would have it
counted once per repeat; such a block can set ``SKIP_REPEATED_BODIES = False`` on this module
for its estimates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ...contract.walk import tensors_in
from .frames import Frame
from .saved import SavedEntry, SavedTensors
from .tensors import TensorMeta, describe

__all__ = ["SKIP_REPEATED_BODIES", "Shortcut", "shortcut_of", "stand_in"]

#: Whether repeated blocks' bodies are skipped in dry runs (their costs are the same).
SKIP_REPEATED_BODIES = True

# Where a saved storage came from: ("arg", i), ("module", i, name), ("result",), ("new",).
Role = tuple[Any, ...]


@dataclass(frozen=True)
class Shortcut:
    """A repeated call's stand-in: its first call's result and what that call saved."""

    result: TensorMeta
    saved: tuple[tuple[Role, SavedEntry], ...]


def _module_tensors(args: tuple[Any, ...]) -> dict[Any, Role]:
    roles: dict[Any, Role] = {}
    for index, value in enumerate(args):
        if isinstance(value, torch.nn.Module):
            for name, tensor in (*value.named_parameters(), *value.named_buffers()):
                roles.setdefault(SavedTensors.key(tensor), ("module", index, name))
    return roles


def shortcut_of(
    result: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    saved: SavedTensors,
    mark: int,
) -> Shortcut | None:
    """How to stand in for repeats of a call that returned ``result`` and saved what
    ``saved`` noted after ``mark``; None when its result is not a fresh plain tensor."""
    if not SKIP_REPEATED_BODIES or type(result) is not torch.Tensor:
        return None
    if result.layout is not torch.strided or result._base is not None:
        return None
    key = SavedTensors.key(result)
    roles = _module_tensors(args)
    arguments = [SavedTensors.key(t) for t in tensors_in((args, kwargs))]
    if key in roles or key in arguments or (result.is_leaf and result.requires_grad):
        return None  # an argument, a parameter or a buffer: not made by the body
    for index, argument in enumerate(arguments):
        roles.setdefault(argument, ("arg", index))
    roles[key] = ("result",)
    entries = [(roles.get(k, ("new",)), entry) for k, entry in saved.since(mark)]
    # An argument that was a leaf needing grad here (the input of an estimate with grad=)
    # is no activation of this call, but the same argument of a repeat (an activation) is.
    for leaf in saved.leaves_since(mark):
        role = roles.get(leaf)
        if role is not None and role[0] == "arg":
            tensor = tensors_in((args, kwargs))[role[1]]
            base = tensor._base if tensor._base is not None else tensor
            nbytes = int(tensor.untyped_storage().nbytes())
            entries.append((role, SavedEntry(nbytes, describe(base), None)))
    return Shortcut(describe(result), tuple(entries))


def stand_in(
    shortcut: Shortcut,
    frame: Frame | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    saved: SavedTensors,
) -> torch.Tensor:
    """The result of a repeated call, made from its first call's; what that call saved is
    noted again, owned by ``frame``."""
    meta = shortcut.result
    result = torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype, device=meta.device)
    if meta.requires_grad:
        result.requires_grad_(True)
        saved.stand_ins.add(SavedTensors.key(result))
    arguments = tensors_in((args, kwargs))
    for role, entry in shortcut.saved:
        tensor: torch.Tensor | None = None
        if role[0] == "arg":
            tensor = arguments[role[1]]
        elif role[0] == "module":
            module = args[role[1]]
            tensor = dict((*module.named_parameters(), *module.named_buffers()))[role[2]]
        elif role[0] == "result":
            tensor = result
        saved.add(tensor, SavedEntry(entry.nbytes, entry.base, frame, entry.origin or entry))
    return result
