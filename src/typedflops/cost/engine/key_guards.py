"""An op's event found again without building its key: a check in C++ of its tensors.

``record()`` keys the usual op (one or two tensors, no keywords) by its tensors' shapes,
dtypes, ``requires_grad`` and layouts and by the grad mode (see :mod:`.opkeys`). Reading
those in Python costs about 0.5 us an op; torch's own tensor guard (the check dynamo runs
before a compiled graph: the tensor's Python type, dispatch keys, dtype, device,
``requires_grad``, sizes and strides, in one C++ call) costs about 0.1 us. Each op's plan
keeps the guards of the last two tensor sets it keyed, with their events: a set that
passes one (with the same grad mode and aliasing) has the same key, so the same event. A
guard checks more than the key (strides, the device, the thread's dispatch state): a set
it refuses is keyed as before, never counted otherwise.

An op seen with ever new tensors (a thousand shapes) stops making guards after
:data:`BUILD_LIMIT` and is keyed as before.
"""

from __future__ import annotations

from typing import Any

import torch

from .events import Event
from .opkeys import EVENTS, Plan, find_event, op_key

__all__ = ["BUILD_LIMIT", "guarded_event", "usual_key"]

try:
    from torch._C._dynamo.guards import TensorGuards

    _TensorGuards: Any = TensorGuards
except ImportError:  # pragma: no cover (a torch without dynamo's guards: keys only)
    _TensorGuards = None

_Tensor = torch.Tensor
#: Guards an op makes at most; past this its tensors change too often for one to pay.
BUILD_LIMIT = 512


def usual_key(plan: Plan, args: tuple[Any, ...], grad: bool, out: Any) -> tuple[Any, ...] | None:
    """The key of an op given one or two arguments where its schema takes tensors (as
    :func:`~.opkeys.tensor_key` keys them, without a checkpoint's mark)."""
    a = args[0]
    try:
        if len(args) == 2:
            b = args[1]
            return (
                plan,
                grad,
                a.size(),
                a.dtype,
                a.requires_grad,
                a.layout,
                b.size(),
                b.dtype,
                b.requires_grad,
                b.layout,
                a is b,
            )
        return (plan, grad, a.size(), a.dtype, a.requires_grad, a.layout)
    except AttributeError:  # a number
        return op_key(plan, args, None, out)
    except RuntimeError:  # a strided nested tensor has no shape
        return None


def guarded_event(plan: Plan, func: Any, args: tuple[Any, ...], grad: bool, out: Any) -> Event:
    """The event of an op of plain tensors (``args``: one or two, any shapes) that no guard
    of its plan passed: found by its key or made, and guarded where it is kept."""
    key, event = find_event(usual_key(plan, args, grad, out), func, plan, args, None, out)
    if (
        _TensorGuards is not None
        and plan.built < BUILD_LIMIT
        and key is not None
        and EVENTS.get(key) is event
        and all(type(value) is _Tensor for value in args)
    ):
        try:
            guard = _TensorGuards(*args, dynamic_dims_sizes=None, dynamic_dims_strides=None)
        except Exception:  # (a torch whose guards take other arguments: keys only)
            plan.built = BUILD_LIMIT
            return event
        same = len(args) == 2 and args[0] is args[1]
        plan.guarded = ((guard, grad, same, event), *plan.guarded[:1])
        plan.built += 1
    return event
