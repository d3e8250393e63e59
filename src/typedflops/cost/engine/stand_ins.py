"""Ops that stand in, on ``meta``, for CUDA kernels that ``meta`` runs differently.

``aten._fused_rms_norm`` has a CUDA kernel but no meta one: on ``meta`` (and on a CPU) it
runs its decomposition, which upcasts to float32 and saves more for backward than the CUDA
kernel does. ``typedflops::_fused_rms_norm`` has the CUDA kernel's outputs (the normalised
input in its dtype, an ``rstd`` per row in at least float32) and autograd (it saves the
input, ``rstd`` and the weight; backward is ``typedflops::_fused_rms_norm_backward``), so a
dry run for a CUDA device allocates, saves and counts what the device would. Tables name them as the
``aten`` kernels they stand for. On real tensors they compute the same values.

``aten.mish``'s backward is ``aten.mish_backward``, a kernel on a CPU and a GPU, but torch
forbids it a meta kernel and runs its decomposition there (softplus, tanh, sigmoid and six
more ops a value): a backward replayed on ``meta`` runs ``typedflops::mish``, whose backward
is ``typedflops::mish_backward``, one kernel as a device runs it.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor

__all__ = ["META_STAND_INS", "fused_rms_norm", "fused_rms_norm_backward", "mish", "mish_backward"]


def _reduced(input: Tensor, normalized_shape: list[int]) -> list[int]:
    return list(range(input.dim() - len(normalized_shape), input.dim()))


def _wide(tensor: Tensor) -> Tensor:
    """``tensor`` computed in at least float32 (the kernel's accumulation)."""
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def _rstd_shape(input: Tensor, normalized_shape: list[int]) -> list[int]:
    kept = input.dim() - len(normalized_shape)
    return [*input.shape[:kept], *([1] * len(normalized_shape))]


@torch.library.custom_op("typedflops::_fused_rms_norm", mutates_args=())
def fused_rms_norm(
    input: Tensor, normalized_shape: list[int], weight: Tensor | None, eps: float | None
) -> tuple[Tensor, Tensor]:
    """RMS norm of ``input`` (``(*batch, *normalized_shape)``) and its ``rstd``
    (``(*batch, 1, ...)``, at least float32), as CUDA's ``_fused_rms_norm`` returns them."""
    x = _wide(input)
    epsilon = torch.finfo(input.dtype).eps if eps is None else eps
    mean_square = x.pow(2).mean(_reduced(input, normalized_shape), keepdim=True)
    rstd = torch.rsqrt(mean_square + epsilon)
    out = x * rstd
    if weight is not None:
        out = out * _wide(weight)
    return out.to(input.dtype), rstd


@fused_rms_norm.register_fake
def _(
    input: Tensor, normalized_shape: list[int], weight: Tensor | None, eps: float | None
) -> tuple[Tensor, Tensor]:
    wide = torch.promote_types(input.dtype, torch.float32)
    rstd = input.new_empty(_rstd_shape(input, normalized_shape), dtype=wide)
    return torch.empty_like(input), rstd


@torch.library.custom_op("typedflops::_fused_rms_norm_backward", mutates_args=())
def fused_rms_norm_backward(
    grad_out: Tensor,
    input: Tensor,
    normalized_shape: list[int],
    rstd: Tensor,
    weight: Tensor | None,
    output_mask: list[bool],
) -> tuple[Tensor, Tensor]:
    """Gradients of :func:`fused_rms_norm` for its input (``input``'s shape) and weight
    (``normalized_shape``; empty where ``weight`` is None or not asked for)."""
    dims = _reduced(input, normalized_shape)
    normed = _wide(input) * rstd
    grad = _wide(grad_out)
    scaled = grad * _wide(weight) if weight is not None else grad
    mean = (scaled * normed).mean(dims, keepdim=True)
    grad_input = ((scaled - normed * mean) * rstd).to(input.dtype)
    grad_weight = input.new_empty(0)
    if weight is not None and output_mask[1]:
        leading = list(range(input.dim() - len(normalized_shape)))
        grad_weight = (grad * normed).sum(leading).to(weight.dtype)
    return grad_input, grad_weight


@fused_rms_norm_backward.register_fake
def _(
    grad_out: Tensor,
    input: Tensor,
    normalized_shape: list[int],
    rstd: Tensor,
    weight: Tensor | None,
    output_mask: list[bool],
) -> tuple[Tensor, Tensor]:
    if weight is not None and output_mask[1]:
        return torch.empty_like(input), torch.empty_like(weight)
    return torch.empty_like(input), input.new_empty(0)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    input, normalized_shape, weight, _ = inputs
    ctx.normalized_shape = normalized_shape
    ctx.has_weight = weight is not None
    ctx.save_for_backward(input, output[1], weight)


def _backward(ctx: Any, grad_out: Tensor, _grad_rstd: Tensor) -> tuple[Any, ...]:
    input, rstd, weight = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], ctx.has_weight and ctx.needs_input_grad[2]]
    grad_input, grad_weight = fused_rms_norm_backward(
        grad_out, input, ctx.normalized_shape, rstd, weight, mask
    )
    return grad_input, None, grad_weight if mask[1] else None, None


fused_rms_norm.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("typedflops::mish", mutates_args=())
def mish(input: Tensor) -> Tensor:
    """``aten.mish``, whose backward is :func:`mish_backward` on every device."""
    return torch.nn.functional.mish(input)


@mish.register_fake
def _(input: Tensor) -> Tensor:
    return torch.empty_like(input)


@torch.library.custom_op("typedflops::mish_backward", mutates_args=())
def mish_backward(grad_out: Tensor, input: Tensor) -> Tensor:
    """``aten.mish_backward``: the gradient times mish's derivative, one kernel."""
    return cast(Tensor, torch.ops.aten.mish_backward.default(grad_out, input))


@mish_backward.register_fake
def _(grad_out: Tensor, input: Tensor) -> Tensor:
    return torch.empty_like(input)


def _mish_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    ctx.save_for_backward(inputs[0])


def _mish_grad(ctx: Any, grad_out: Tensor) -> Tensor:
    (input,) = ctx.saved_tensors
    return cast(Tensor, mish_backward(grad_out, input))


mish.register_autograd(_mish_grad, setup_context=_mish_setup)

#: The ``aten`` ops a backward replay on ``meta`` runs as their stand-ins.
META_STAND_INS: dict[Any, Any] = {
    torch.ops.aten._fused_rms_norm.default: torch.ops.typedflops._fused_rms_norm.default,
    torch.ops.aten.mish.default: torch.ops.typedflops.mish.default,
    torch.ops.aten.mish_.default: torch.ops.typedflops.mish.default,  # (on the input's copy)
}
