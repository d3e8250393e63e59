"""What ``torch.library`` makes for a custom op's autograd: its forward runs with grad mode
off, yet autograd differentiates it (the op's registered backward), and its generated
``autograd.Function``'s backward is counted by replaying its event."""

from __future__ import annotations

import sys
import types
from typing import Any

import torch
import torch._library.autograd as torch_autograd_impl

__all__ = ["generated_for_custom_op", "in_custom_op_autograd"]


def _custom_op_forward() -> Any:
    """The code of the forward that ``torch.library`` makes for a custom op's autograd."""
    make = getattr(torch_autograd_impl, "make_autograd_impl", None)
    consts = make.__code__.co_consts if make is not None else ()
    found = [c for c in consts if isinstance(c, types.CodeType) and c.co_name == "forward"]
    return found[0] if len(found) == 1 else None


_CUSTOM_OP_FORWARD = _custom_op_forward()


def in_custom_op_autograd(func: Any) -> bool:
    """Whether ``func`` (not an ``aten`` op) runs inside the autograd forward of a
    ``torch.library`` custom op: grad mode is off there, but autograd differentiates it (the
    op's registered backward), so its backward is replayed like an ``aten`` op's."""
    if _CUSTOM_OP_FORWARD is None or func.namespace == "aten" or torch.is_grad_enabled():
        return False
    frame: types.FrameType | None = sys._getframe(1)
    for _ in range(16):  # the dispatch mode's frames, then the custom op's forward
        if frame is None:
            return False
        if frame.f_code is _CUSTOM_OP_FORWARD:
            return True
        frame = frame.f_back
    return False


def generated_for_custom_op(cls: type) -> bool:
    """Whether an autograd.Function class is the one ``torch.library`` makes for a custom
    op (whose backward its event's replay counts)."""
    return cls.__module__ == torch_autograd_impl.__name__
