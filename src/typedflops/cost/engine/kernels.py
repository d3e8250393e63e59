"""The kernels a target device runs, in dry runs on ``meta``.

Dry runs use ``meta`` tensors, on which two calls run otherwise than on the device they
cost:

- ``F.scaled_dot_product_attention`` always takes its math path on ``meta``. A CPU or a GPU
  picks a fused kernel (flash, memory-efficient, cuDNN) with its own FLOPs and saved
  tensors, forward and backward. A dry run asks torch which kernel the target picks
  (``torch._fused_sdp_choice`` on one-element tensors of the same dtype, head sizes, mask
  and flags, honouring ``torch.nn.attention.sdpa_kernel``) and calls that kernel on the
  meta tensors; every fused kernel has a meta implementation, backward included. Where the
  target is CUDA and no CUDA device is present (planning for a GPU on a laptop), the choice
  is torch's rule for a data-center GPU (sm80 and later): flash for 16-bit inputs with no
  mask and equal head sizes up to 256, else memory-efficient for float32 and 16-bit inputs
  whose head sizes it aligns, else math; each only where its flag is on.
- ``F.rms_norm`` on CUDA is one fused kernel (``_fused_rms_norm``: it keeps the input and a
  float32 ``rstd``); on ``meta`` and on a CPU it is a decomposition that keeps float32
  copies. For a CUDA target the dry run calls a stand-in with the kernel's outputs and
  autograd (:mod:`.stand_ins`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

from . import stand_ins  # noqa: F401  (defines torch.ops.typedflops._fused_rms_norm)
from .frames import no_frame

__all__ = [
    "SDPA",
    "TargetKernels",
    "attention_on_meta",
    "describe_kernels",
    "kernels_of",
    "meta_target",
    "on_target",
]

SDPA = F.scaled_dot_product_attention
RMS_NORM = F.rms_norm

aten = torch.ops.aten

_MATH, _FLASH, _EFFICIENT, _CUDNN = 0, 1, 2, 3

# The device type whose kernels a dry run of a call made on `meta` stands for (a model
# built on meta to be costed): None keeps meta's own (math) attention.
_meta_target: ContextVar[str | None] = ContextVar("typedflops_meta_target", default=None)


def meta_target() -> str | None:
    """The device type a dry run of a call on ``meta`` costs the kernels of, if any."""
    return _meta_target.get()


@contextlib.contextmanager
def kernels_of(device_type: str | None) -> Iterator[None]:
    """Inside the block, dry runs of calls whose tensors are on ``meta`` (a model built on
    meta) cost attention as the kernel ``device_type`` (``"cpu"``, ``"cuda"``) would run."""
    token = _meta_target.set(device_type)
    try:
        yield
    finally:
        _meta_target.reset(token)


def describe_kernels(device_type: str | None) -> str:
    """In words, the kernels a dry run costs for ``device_type`` (as reports name them).

    >>> describe_kernels("cuda")
    "a GPU's (attention as torch picks it there: flash for 16-bit inputs; CUDA's fused RMS norm)"
    """
    if device_type == "cuda":
        return (
            "a GPU's (attention as torch picks it there: flash for 16-bit inputs; "
            "CUDA's fused RMS norm)"
        )
    if device_type == "cpu":
        return "a CPU's (attention as torch picks it there: its fused flash kernel)"
    return "meta's own (math attention, which keeps the s x s scores)"


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    found = dict(zip(names, args, strict=False))
    found.update(kwargs)
    found.setdefault("attn_mask", None)
    found.setdefault("dropout_p", 0.0)
    found.setdefault("is_causal", False)
    found.setdefault("scale", None)
    found.setdefault("enable_gqa", False)
    return found


def _choice(target: str, call: dict[str, Any]) -> int:
    """The backend the target device would pick for this call (math when unsure)."""
    if target not in ("cpu", "cuda"):
        return _MATH
    query, key, value = call["query"], call["key"], call["value"]
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return _MATH
    mask = call["attn_mask"]
    if target == "cuda" and not torch.cuda.is_available():
        return _gpu_choice(
            query.dtype,
            (query.shape[-1], key.shape[-1], value.shape[-1]),
            mask is not None,
            query.shape[1] != key.shape[1],
            _flags(),
        )
    with no_frame():  # asking torch is not part of the call
        return _cached_choice(
            target,
            query.dtype,
            (query.shape[-1], key.shape[-1], value.shape[-1]),
            None if mask is None else (mask.dim(), mask.dtype),
            float(call["dropout_p"]),
            bool(call["is_causal"]),
            bool(call["enable_gqa"]),
            _flags(),
        )


def _flags() -> tuple[bool, ...]:
    backends = torch.backends.cuda
    return (
        backends.flash_sdp_enabled(),  # type: ignore[no-untyped-call]
        backends.mem_efficient_sdp_enabled(),  # type: ignore[no-untyped-call]
        backends.math_sdp_enabled(),  # type: ignore[no-untyped-call]
        backends.cudnn_sdp_enabled(),  # type: ignore[no-untyped-call]
    )


_HALF = (torch.float16, torch.bfloat16)


def _gpu_choice(
    dtype: torch.dtype,
    heads: tuple[int, int, int],
    masked: bool,
    grouped: bool,
    flags: tuple[bool, ...],
) -> int:
    """The backend torch picks on a data-center GPU (sm80 and later), found without one:
    flash, then memory-efficient, then math, each where it takes the call and its flag
    (``flags``: flash, memory-efficient, math, cuDNN) is on.

    >>> on = (True, True, True, True)
    >>> _gpu_choice(torch.bfloat16, (64, 64, 64), False, False, on) == _FLASH
    True
    >>> _gpu_choice(torch.float32, (64, 64, 64), False, False, on) == _EFFICIENT
    True
    >>> _gpu_choice(torch.float32, (63, 63, 63), False, False, on) == _MATH
    True
    """
    flash, efficient, _, _ = flags
    same = heads[0] == heads[1] == heads[2]
    if flash and dtype in _HALF and not masked and same and heads[0] <= 256:
        return _FLASH
    alignment = 8 if dtype in _HALF else 4
    aligned = heads[0] == heads[1] and all(h % alignment == 0 for h in (heads[0], heads[2]))
    if efficient and (dtype in _HALF or dtype == torch.float32) and aligned and not grouped:
        return _EFFICIENT
    return _MATH


@functools.lru_cache(maxsize=256)
def _cached_choice(
    target: str,
    dtype: torch.dtype,
    heads: tuple[int, int, int],
    mask: tuple[int, torch.dtype] | None,
    dropout_p: float,
    is_causal: bool,
    enable_gqa: bool,
    flags: tuple[bool, ...],
) -> int:
    # Asked of torch's own kernels with every mode set aside: under a FakeTensorMode (a
    # dry run of FSDP) torch would answer for fake tensors (math), and the answer is kept.
    with _disable_current_modes():
        return _ask_torch(target, dtype, heads, mask, dropout_p, is_causal, enable_gqa)


def _ask_torch(
    target: str,
    dtype: torch.dtype,
    heads: tuple[int, int, int],
    mask: tuple[int, torch.dtype] | None,
    dropout_p: float,
    is_causal: bool,
    enable_gqa: bool,
) -> int:
    query = torch.zeros(1, 1, 1, heads[0], dtype=dtype, device=target)
    key = torch.zeros(1, 1, 1, heads[1], dtype=dtype, device=target)
    value = torch.zeros(1, 1, 1, heads[2], dtype=dtype, device=target)
    attn_mask = None
    if mask is not None:
        attn_mask = torch.zeros([1] * mask[0], dtype=mask[1], device=target)
    try:
        return int(
            torch._fused_sdp_choice(
                query,
                key,
                value,
                attn_mask=attn_mask,
                dropout_p=dropout_p,
                is_causal=is_causal,
                enable_gqa=enable_gqa,
            )
        )
    except (RuntimeError, TypeError):
        return _MATH


def attention_on_meta(target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``F.scaled_dot_product_attention(*args, **kwargs)`` on meta tensors, through the
    kernel ``target`` (``"cpu"``, ``"cuda"``) would run."""
    call = _arguments(args, kwargs)
    choice = _choice(target, call)
    q, k, v = call["query"], call["key"], call["value"]
    mask, dropout_p, causal, scale = (
        call["attn_mask"],
        call["dropout_p"],
        call["is_causal"],
        call["scale"],
    )
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if choice == _FLASH and target == "cpu":
        return aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, dropout_p, causal, attn_mask=mask, scale=scale
        )[0]
    if choice == _FLASH and mask is None:
        return aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, causal, scale=scale)[0]
    if choice == _EFFICIENT:
        return aten._scaled_dot_product_efficient_attention(
            q, k, v, mask, grad, dropout_p, causal, scale=scale
        )[0]
    if choice == _CUDNN:
        return aten._scaled_dot_product_cudnn_attention(
            q, k, v, mask, grad, dropout_p, causal, scale=scale
        )[0]
    return SDPA(*args, **kwargs)


def _channels_last(x: torch.Tensor) -> bool:
    layout = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
    return layout is not None and x.is_contiguous(memory_format=layout) and not x.is_contiguous()


def rms_norm_on_meta(target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``F.rms_norm(*args, **kwargs)`` on meta tensors as ``target`` runs it: CUDA's fused
    kernel where torch takes it (a real input whose weight, if any, has its dtype)."""
    names = ("input", "normalized_shape", "weight", "eps")
    call = {"weight": None, "eps": None, **dict(zip(names, args, strict=False)), **kwargs}
    x, weight = call["input"], call["weight"]
    fused = target == "cuda" and not x.is_complex() and not _channels_last(x)
    if fused and (weight is None or weight.dtype == x.dtype):
        shape = [int(size) for size in call["normalized_shape"]]
        return torch.ops.typedflops._fused_rms_norm(x, shape, weight, call["eps"])[0]
    return RMS_NORM(*args, **kwargs)


def on_target(target: str, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` on meta tensors as the ``target`` device would run it."""
    if func is SDPA:
        return attention_on_meta(target, args, kwargs)
    if func is RMS_NORM:
        return rms_norm_on_meta(target, args, kwargs)
    return func(*args, **kwargs)


class TargetKernels(TorchFunctionMode):
    """The target device's kernels while nothing is counted (a block repeated in a dry run
    runs its ops uncounted, but must save for backward what the counted block saved)."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return on_target(self.target, func, args, kwargs or {})
