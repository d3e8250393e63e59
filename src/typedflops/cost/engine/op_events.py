"""The event of one op that ran: its costs by its rule, and what it saw (metadata only)."""

from __future__ import annotations

from typing import Any

import torch

from ...contract.walk import tensors_in
from ..storage import nbytes
from .custom_ops import in_custom_op_autograd
from .events import Event, Group, current_group, new_group
from .rules import FREE, Free, OpCall, RuleEntry, is_torch_counted, is_view, op_name
from .skipped_work import SKIPS
from .tensors import describe, differentiable, flat_tensors, is_float, nbytes_of

__all__ = ["group_of", "make_event", "requires_backward"]


def make_event(
    func: Any,
    found: RuleEntry | Free | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out: Any,
    shared: bool = False,
) -> Event:
    """The event of one op that ran: its costs by its rule (``found``), its metadata.
    ``shared``: an event kept for every call that runs the op alike (``record()``'s), whose
    group is the op's own, not one call's."""
    if found is FREE and not requires_backward(args, kwargs):
        return _free_event(func, args, kwargs, out, shared)
    described_args = describe(args)
    described_kwargs = tuple((key, describe(value)) for key, value in kwargs.items())
    described_out = describe(out)
    name = op_name(func)
    inputs = flat_tensors((described_args, described_kwargs))
    outputs = flat_tensors(described_out)
    entry = found if isinstance(found, RuleEntry) else None
    flops = matmul = 0
    counted = found is not None
    if entry is not None:
        call = OpCall(name, described_args, dict(described_kwargs), described_out)
        try:
            flops = entry.count(call, args, kwargs, out)
            matmul = entry.matmul_count(call, flops)
        except Exception:
            if entry.source == "user":
                raise  # (the user's rule says what is wrong)
            flops = matmul = 0
            counted = False  # an op our rule does not know in this form: named, not zero
    elif found is None and not any(is_float(t) for t in (*inputs, *outputs)):
        counted = True  # no floating-point values: 0 FLOPs by convention, nothing missed
    view = found is FREE and is_view(func)
    read = 0 if view else _unique_bytes(args, kwargs)
    written = 0 if view else sum(nbytes_of(t) for t in outputs)
    skip = SKIPS.get(getattr(func, "_overloadpacket", None))
    recorded = torch.is_grad_enabled() or in_custom_op_autograd(func)
    needs_grad = recorded and any(t.requires_grad and is_float(t) for t in inputs)
    return Event(
        op=name,
        func=func,
        group=group_of(name, shared),
        args=described_args,
        kwargs=described_kwargs,
        out=described_out,
        flops=flops,
        entry=entry,
        counted=counted,
        bytes_read=read,
        bytes_written=written,
        view=view,
        needs_grad=needs_grad,
        torch_counted=is_torch_counted(func._overloadpacket),
        matmul_flops=matmul,
        assumed=None if skip is None else skip.unknown(args, kwargs),
    )


def requires_backward(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether autograd records an op on these arguments (grad mode on, one of them a
    floating-point tensor that requires grad)."""
    if not torch.is_grad_enabled():
        return False
    return any(t.requires_grad and differentiable(t) for t in tensors_in((args, kwargs)))


def group_of(name: str, shared: bool) -> Group:
    """The group of a new event: the current user call's, or the op's own; ``shared``: a
    record's, one group per name (events shared by every call alike)."""
    if shared:
        found = _SHARED.get(name)
        if found is None:
            found = _SHARED[name] = Group(name, None, -1)
        return found
    return current_group() or new_group(name)


_SHARED: dict[str, Group] = {}


def _free_event(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, shared: bool = False
) -> Event:
    """A zero-FLOP op that needs no backward: its bytes, not its arguments' description.
    One that hands back its input as it is (``dropout`` not training, under
    ``inference_mode``) moves no bytes, as a view."""
    name = op_name(func)
    view = is_view(func) or _hands_back(func, args, out)
    return Event(
        op=name,
        func=func,
        group=group_of(name, shared),
        args=(),
        kwargs=(),
        out=None,
        flops=0,
        entry=None,
        counted=True,
        bytes_read=0 if view else _unique_bytes(args, kwargs),
        bytes_written=0 if view else sum(nbytes(t) for t in tensors_in(out)),
        view=view,
        needs_grad=False,
        torch_counted=False,
    )


def _hands_back(func: Any, args: tuple[Any, ...], out: Any) -> bool:
    """Whether ``out`` is one of the op's arguments, which it does not write."""
    if not isinstance(out, torch.Tensor) or not any(out is value for value in args):
        return False
    return not any(
        a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments
    )


def _unique_bytes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Bytes of the distinct input tensors (``x * x`` reads ``x`` once)."""
    seen: set[int] = set()
    total = 0
    for tensor in tensors_in((args, kwargs)):
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += nbytes(tensor)
    return total


# -- naming what the user called ----------------------------------------------------------
