"""The attention kernel torch picks on an NVIDIA GPU, found without one.

``F.scaled_dot_product_attention`` on CUDA runs the first backend of torch's priority order
whose filters take the call (``select_sdp_backend`` in torch's
``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``). The order depends on the GPU:
on compute capability 9.x and 10.x (H100, H200, B200) torch puts cuDNN first (its cuDNN is
newer than 9.15, as in torch's CUDA 13 builds; ``TORCH_CUDNN_SDPA_DEPRIORITIZED=1`` puts it
back last); on every other GPU the order is flash, memory-efficient, math, cuDNN, so cuDNN
runs there only when the others are switched off. An order set with
``sdpa_kernel(..., set_priority=True)`` is followed wherever it runs.

The filters, as torch applies them to a 4-D call (inputs of one dtype, one batch size):

- cuDNN: 16-bit inputs on sm80 to sm121; head sizes multiples of 8, at most 256 on sm90
  and 128 elsewhere (192 for queries and keys with values of 128 on sm10x); a mask 2-D or
  4-D that broadcasts over the batch and heads (and needs no gradient); dropout in steps of
  1/16; a key length other than 1, and a query length other than 1 with dropout; not under
  ``torch.use_deterministic_algorithms``. These are torch 2.11's limits with its cuDNN 9.19,
  as an H200 picked (training included); torch from mid-2026 (pytorch/pytorch#185553) keeps
  head sizes over 128 for cuDNN newer than 9.22, whose backward takes 256 but not 160.
- flash: 16-bit inputs on sm80 to sm121; no mask; equal head sizes up to 256 (training with
  head sizes in (192, 224], or (224, 256] with dropout, is refused on sm86 to sm89 and
  sm120/121); causal only when the query and key lengths are equal.
- memory-efficient: float32, float16 and (from sm80) bfloat16 on sm50 to sm121; query and
  key head sizes equal, head sizes of query and value multiples of 8 for 16-bit inputs and
  of 4 for float32 (from sm80; any on sm7x), no grouped key/value heads.
- math: whenever its flag is on.

Grouped key/value heads (``enable_gqa=True``, their number dividing the query's) are taken
by flash and cuDNN. Each backend only where its flag is on
(``torch.backends.cuda.*_sdp_enabled()``, as ``sdpa_kernel`` sets them). A GPU whose
capability is unknown is taken as sm80 (an A100): flash, then memory-efficient, then math.

>>> half = AttentionCall(torch.bfloat16, (128, 128, 128))
>>> on = (True, True, True, True)
>>> [gpu_choice(half, on, gpu) for gpu in ((9, 0), (8, 0), None)] == [CUDNN, FLASH, FLASH]
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

__all__ = [
    "CUDNN",
    "EFFICIENT",
    "FLASH",
    "MATH",
    "AttentionCall",
    "gpu_choice",
    "priority_order",
]

# torch's SDPBackend numbers (what torch._fused_sdp_choice returns)
MATH, FLASH, EFFICIENT, CUDNN = 0, 1, 2, 3

_HALF = (torch.float16, torch.bfloat16)
_DEFAULT_ORDER = (FLASH, EFFICIENT, MATH, CUDNN)
_CUDNN_ORDER = (CUDNN, FLASH, EFFICIENT, MATH)
#: The GPU a capability-less dry run stands for: a data-center Ampere (A100).
_UNKNOWN = (8, 0)


@dataclass(frozen=True)
class AttentionCall:
    """What torch's filters read of one attention call (batch-free, hashable).

    ``heads``: the head sizes of query, key and value (their last dims); ``mask``: the
    mask's dtype (None without one), ``mask_fits``: its shape is one cuDNN takes (2-D, or
    4-D broadcasting over the batch and the heads) and it needs no gradient; ``grouped``:
    fewer key/value heads than query heads, with ``enable_gqa``; ``grad``: an input
    requires grad with grad mode on; ``lengths``: the query and key lengths where only 0,
    1 and which is longer matter (2 stands for any longer length; a longer key is 3).
    """

    dtype: torch.dtype
    heads: tuple[int, int, int]
    mask: torch.dtype | None = None
    mask_fits: bool = True
    grouped: bool = False
    causal: bool = False
    dropout: float = 0.0
    grad: bool = False
    lengths: tuple[int, int] = (2, 2)


def reduced_lengths(query: int, key: int) -> tuple[int, int]:
    """The query and key lengths as the filters see them (see :class:`AttentionCall`).

    >>> reduced_lengths(512, 512), reduced_lengths(1, 4096), reduced_lengths(64, 128)
    ((2, 2), (1, 2), (2, 3))
    """
    short = (min(query, 2), min(key, 2))
    if short == (2, 2) and query != key:
        return (2, 3) if query < key else (3, 2)
    return short


def _between(gpu: tuple[int, int], low: tuple[int, int], high: tuple[int, int]) -> bool:
    return low <= gpu <= high


def _cudnn_takes(call: AttentionCall, gpu: tuple[int, int]) -> bool:
    if call.dtype not in _HALF or not _between(gpu, (8, 0), (12, 1)):
        return False
    if call.mask is not None and not call.mask_fits:
        return False
    if call.dropout * 16 != int(call.dropout * 16):
        return False
    query_length, key_length = call.lengths
    if 0 in call.lengths or key_length == 1 or (call.dropout > 0 and query_length == 1):
        return False
    deterministic = torch.are_deterministic_algorithms_enabled()
    if deterministic and not torch.is_deterministic_algorithms_warn_only_enabled():
        return False
    qk, _, v = call.heads
    limit = 256 if gpu == (9, 0) else 128
    if gpu[0] == 10 and (qk, v) == (192, 128):
        limit = 192
    return qk <= limit and v <= limit and qk % 8 == 0 and v % 8 == 0


def _flash_takes(call: AttentionCall, gpu: tuple[int, int]) -> bool:
    if call.dtype not in _HALF or call.mask is not None or not _between(gpu, (8, 0), (12, 1)):
        return False
    size = call.heads[0]
    if call.heads != (size, size, size) or size > 256 or 0 in call.lengths:
        return False
    if call.causal and call.lengths[0] != call.lengths[1]:
        return False
    narrow = _between(gpu, (8, 6), (8, 9)) or _between(gpu, (12, 0), (12, 1))
    if call.grad and narrow and size > 192:
        return size > 224 and call.dropout == 0
    return True


def _efficient_takes(call: AttentionCall, gpu: tuple[int, int]) -> bool:
    if not _between(gpu, (5, 0), (12, 1)) or call.grouped or 0 in call.lengths:
        return False
    half = call.dtype in _HALF
    allowed = (torch.float16, torch.float32) + ((torch.bfloat16,) if gpu >= (8, 0) else ())
    if call.dtype not in allowed:
        return False
    # torch's minimum_gemm_alignment: tensor cores from sm80, and for 16-bit from sm70
    alignment = 4 if gpu >= (8, 0) else 1
    if gpu >= (8, 0) or (gpu >= (7, 0) and half):
        alignment = max(alignment, 8 if half else 4)
    qk, k, v = call.heads
    return qk == k and qk > 0 and v > 0 and qk % alignment == 0 and v % alignment == 0


def priority_order(gpu: tuple[int, int] | None) -> tuple[int, ...]:
    """The backends in the order torch tries them on a GPU of compute capability ``gpu``:
    an order set with ``sdpa_kernel(..., set_priority=True)``, else cuDNN first on 9.x and
    10.x (unless ``TORCH_CUDNN_SDPA_DEPRIORITIZED=1``), else flash, memory-efficient,
    math, cuDNN.

    >>> priority_order((9, 0)) == (CUDNN, FLASH, EFFICIENT, MATH)
    True
    >>> priority_order((8, 9)) == (FLASH, EFFICIENT, MATH, CUDNN)
    True
    """
    getter = getattr(torch._C, "_get_sdp_priority_order", None)
    found = tuple(int(b) for b in getter() if int(b) in _DEFAULT_ORDER) if getter else ()
    if found and found not in (_DEFAULT_ORDER, _CUDNN_ORDER):
        return found  # set by the user
    major = (gpu or _UNKNOWN)[0]
    if major in (9, 10) and os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED") != "1":
        return _CUDNN_ORDER
    return _DEFAULT_ORDER


def gpu_choice(
    call: AttentionCall, flags: tuple[bool, ...], gpu: tuple[int, int] | None = None
) -> int:
    """The backend torch picks for ``call`` on a GPU of compute capability ``gpu`` (None:
    unknown, taken as sm80), found without one; ``flags`` are torch's (flash,
    memory-efficient, math, cuDNN) switches. Math where no backend takes the call (torch
    would refuse it).

    >>> on = (True, True, True, True)
    >>> gpu_choice(AttentionCall(torch.float32, (64, 64, 64)), on, (9, 0)) == EFFICIENT
    True
    >>> gpu_choice(AttentionCall(torch.float32, (63, 63, 63)), on, (9, 0)) == MATH
    True
    """
    capability = gpu or _UNKNOWN
    flash, efficient, math, cudnn = flags
    takes = {
        CUDNN: cudnn and _cudnn_takes(call, capability),
        FLASH: flash and _flash_takes(call, capability),
        EFFICIENT: efficient and _efficient_takes(call, capability),
        MATH: math,
    }
    for backend in priority_order(gpu):
        if takes[backend]:
            return backend
    return MATH
