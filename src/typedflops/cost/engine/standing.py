"""The device type a dry run's meta ops stand for: :func:`~.kernels.kernels_of`'s (a model
built on meta costed as a device's kernels), or :func:`standing_for`'s (a dry run of a call
on a device), which comes first. Kept apart from the modules that use it, which import the
rules: a rule reads it too."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["META_TARGET", "standing_for", "stands_for"]

#: The device type :func:`~.kernels.kernels_of` costs meta ops as (None: meta's own).
META_TARGET: ContextVar[str | None] = ContextVar("typedflops_meta_target", default=None)
# The device type a dry run's meta ops stand for (None: meta's own, or kernels_of's).
_standing: ContextVar[str | None] = ContextVar("typedflops_standing_for", default=None)


@contextlib.contextmanager
def standing_for(device_type: str | None) -> Iterator[None]:
    """Inside the block, ops on meta tensors run as ``device_type``'s kernels would
    (``"cpu"``, ``"cuda"``; None leaves :func:`~.kernels.kernels_of`'s choice)."""
    token = _standing.set(device_type)
    try:
        yield
    finally:
        _standing.reset(token)


def stands_for() -> str | None:
    """The device type the meta ops of a dry run stand for, if any."""
    return _standing.get() or META_TARGET.get()
