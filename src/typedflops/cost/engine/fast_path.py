"""The fused inference kernel of ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer``
(their "fast path"), kept off while typedflops counts.

These modules run their fused kernel unless a torch-function mode is active or
``torch.backends.mha`` says not to, and ``nn.TransformerEncoder`` checks a padding mask's
alignment first (``logical_not``, ``_nested_tensor_from_mask_left_aligned``) when it may.
Outside decorated calls a record's naming mode keeps the kernel off; inside them no function
mode runs. So the fast path is turned off while any record is open or any dry run runs: a
module is counted as the same ops (projections, attention, norms) inside a decorated call,
outside one and in a dry run, and an estimate counts what a record around the call counts.
``torch.backends.mha`` is set back when the last one ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

__all__ = ["fast_path_off", "hold_fast_path", "release_fast_path"]

_lock = threading.Lock()
_holders = 0
_before = True


def hold_fast_path() -> None:
    """Turn the fast path off until the matching :func:`release_fast_path`."""
    global _holders, _before
    with _lock:
        if _holders == 0:
            _before = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(False)
        _holders += 1


def release_fast_path() -> None:
    """Set ``torch.backends.mha`` back once nothing holds the fast path off."""
    global _holders
    with _lock:
        _holders -= 1
        if _holders == 0 and not torch.backends.mha.get_fastpath_enabled():
            torch.backends.mha.set_fastpath_enabled(_before)


@contextlib.contextmanager
def fast_path_off() -> Iterator[None]:
    """The fast path off inside the block."""
    hold_fast_path()
    try:
        yield
    finally:
        release_fast_path()
