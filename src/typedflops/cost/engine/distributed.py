"""What a rank computes when its tensors are DTensors: the local ops, counted once.

A dispatch mode sees an op on DTensors before DTensor does. Handing it on
(``NotImplemented``) lets DTensor run it as the local ops and collectives of this rank,
which the mode then sees one by one (torch's ``CommDebugMode`` works the same way). DTensor
also runs some ops once more on fake tensors of the global shapes, only to learn their
outputs' metadata (``ShardingPropagator``); those are not this rank's work and are not
counted (:func:`in_sharding_propagation`).

torch's data-parallel wrappers hook their training steps into autograd with autograd
Functions whose backward hands the gradients on unchanged and runs the wrapper's own step
there: FSDP2 gathers a module's parameters before its backward and reshards them (and
reduce-scatters their gradients) after it; DDP queues its all-reduce. Their backward is no
part of the model's arithmetic, and running it to count it (as any other Function's is, on
fake tensors) would run that step in the middle of the forward (:func:`training_hook`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from .stack import frame_of

__all__ = ["in_sharding_propagation", "is_dtensor_call", "training_hook"]


#: The Functions torch's wrappers carry their backward steps on, by module and name.
_TRAINING_HOOKS = frozenset(
    {
        ("torch.distributed.fsdp._fully_shard._fsdp_state", "RegisterPreBackwardFunction"),
        ("torch.distributed.fsdp._fully_shard._fsdp_param_group", "RegisterPostBackwardFunction"),
        ("torch.nn.parallel.distributed", "_DDPSink"),
    }
)

#: How far up the stack DTensor's metadata pass is looked for (it calls the op directly).
_DEPTH = 24


def _dtensor_module() -> Any:
    """torch's DTensor module if something imported it (else no tensor can be a DTensor,
    and nothing is imported here)."""
    return sys.modules.get("torch.distributed.tensor._api")


def is_dtensor_call(types: Iterable[type]) -> bool:
    """Whether a dispatched op has DTensor arguments (``types`` from ``__torch_dispatch__``)."""
    module = _dtensor_module()
    return module is not None and any(issubclass(kind, module.DTensor) for kind in types)


def in_sharding_propagation() -> bool:
    """Whether the op being dispatched runs inside DTensor's metadata pass (global shapes,
    fake tensors, nothing this rank computes)."""
    module = sys.modules.get("torch.distributed.tensor._sharding_prop")
    if module is None:
        return False
    code = module.ShardingPropagator._propagate_tensor_meta_non_cached.__code__
    return frame_of(code, _DEPTH, 3) is not None


def training_hook(cls: type) -> bool:
    """Whether an autograd.Function class is one that torch's FSDP2 or DDP carries a
    training step on (see the module): its backward returns its gradients as it got them
    (0 FLOPs), and is never run to count it."""
    return (cls.__module__, cls.__qualname__) in _TRAINING_HOOKS
