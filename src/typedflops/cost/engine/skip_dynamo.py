"""Keeping dynamo out of the counting modes' ``__torch_dispatch__``.

torch wraps a dispatch mode's ``__torch_dispatch__`` in ``torch._disable_dynamo`` so that a
compiled function called under the mode runs its ops eagerly through it; on small ops that
wrapper is a fifth of a mode's time. Marking the method's code as skipped, with every frame it
calls, has the same effect at no cost per op: done once per class, on first use.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["keep_dynamo_out"]

_kept_out: set[type] = set()


def keep_dynamo_out(mode_class: Any) -> None:
    """Make dynamo skip ``mode_class.__torch_dispatch__`` and all it calls (the class
    declares ``_should_skip_dynamo`` False, so torch left the method unwrapped)."""
    if mode_class in _kept_out:
        return
    raw = mode_class.__dict__["__torch_dispatch__"]
    try:
        from torch._dynamo import eval_frame, types

        skip = types.FrameAction.SKIP  # type: ignore[attr-defined]
        strategy = types.FrameExecStrategy(skip, skip)  # type: ignore[attr-defined]
        eval_frame.set_code_exec_strategy(raw.__code__, strategy)  # type: ignore[attr-defined]
    except (ImportError, AttributeError, TypeError):  # as torch does it, then
        mode_class.__torch_dispatch__ = torch._disable_dynamo(raw, recursive=True)  # type: ignore[attr-defined]
    _kept_out.add(mode_class)
