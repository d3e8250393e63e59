"""Scaled dot-product attention in dry runs: the kernel the target device would pick.

Dry runs use ``meta`` tensors, on which ``F.scaled_dot_product_attention`` always takes its
math path. A CPU or a GPU would pick a fused kernel (flash, memory-efficient, cuDNN) with
its own FLOPs, forward and backward. So a dry run asks torch which kernel the target device
picks (``torch._fused_sdp_choice`` on one-element tensors of the same dtype, head sizes,
mask and flags, honouring ``torch.nn.attention.sdpa_kernel``) and calls that kernel on the
meta tensors; every fused kernel has a meta implementation, backward included.
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

from .frames import no_frame

__all__ = ["SDPA", "TargetKernels", "attention_on_meta", "kernels_of", "meta_target"]

SDPA = F.scaled_dot_product_attention

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
    if target == "cuda" and not torch.cuda.is_available():
        return _MATH
    if target not in ("cpu", "cuda"):
        return _MATH
    query, key, value = call["query"], call["key"], call["value"]
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return _MATH
    mask = call["attn_mask"]
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


class TargetKernels(TorchFunctionMode):
    """Attention through the target device's kernel while nothing is counted (a block
    repeated in a dry run runs its ops uncounted, but must save for backward what the
    counted block saved)."""

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
        if func is SDPA:
            return attention_on_meta(self.target, args, kwargs or {})
        return func(*args, **(kwargs or {}))
