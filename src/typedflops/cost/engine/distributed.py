"""What a rank computes when its tensors are DTensors: the local ops, counted once.

A dispatch mode sees an op on DTensors before DTensor does. Handing it on
(``NotImplemented``) lets DTensor run it as the local ops and collectives of this rank,
which the mode then sees one by one (torch's ``CommDebugMode`` works the same way). DTensor
also runs some ops once more on fake tensors of the global shapes, only to learn their
outputs' metadata (``ShardingPropagator``); those are not this rank's work and are not
counted (:func:`in_sharding_propagation`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from types import FrameType
from typing import Any

__all__ = ["in_sharding_propagation", "is_dtensor_call"]


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
    frame: FrameType | None = sys._getframe(2)
    for _ in range(_DEPTH):
        if frame is None:
            return False
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False
