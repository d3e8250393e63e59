"""Whether a given Python function is running, found on the stack of the op being counted.

A counting mode asks this of a few functions of torch's that call ops it must treat apart
(a ``torch.autograd.Function``'s ``apply``, DTensor's metadata pass): their frames are
looked for up the stack, up to a depth, by their code objects.
"""

from __future__ import annotations

import sys
from types import CodeType, FrameType

__all__ = ["frame_of"]

_getframe = sys._getframe


def frame_of(code: CodeType, depth: int, skip: int = 2) -> FrameType | None:
    """The innermost frame running ``code`` among the ``depth`` frames that start ``skip``
    frames above this one's (so 2: above its caller's), or None (a thread with fewer frames,
    such as one of autograd's engine, included)."""
    try:
        frame: FrameType | None = _getframe(skip)
    except ValueError:  # (fewer frames than that)
        return None
    for _ in range(depth):
        if frame is None:
            return None
        if frame.f_code is code:
            return frame
        frame = frame.f_back
    return None
