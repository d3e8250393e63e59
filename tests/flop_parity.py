"""Helpers of the FlopCounterMode parity tests: tensors, both counters, the attention kernels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from typedflops import record
from typedflops.cost.engine.recorder import torch_counts

aten = torch.ops.aten
Body = Callable[[], Any]


def T(*shape: int, grad: bool = False) -> Tensor:
    """A random CPU tensor of this shape."""
    return torch.randn(*shape, requires_grad=grad)


def M(*shape: int, dtype: torch.dtype = torch.float16, grad: bool = True) -> Tensor:
    """A meta tensor of this shape (no storage: any size costs nothing)."""
    return torch.empty(*shape, device="meta", dtype=dtype, requires_grad=grad)


def torch_total(body: Body, backward: bool = False, **options: Any) -> int:
    """FlopCounterMode's total for ``body()`` (and the backward of its sum)."""
    with FlopCounterMode(display=False, **options) as counter:
        out = body()
        if backward:
            out.sum().backward()
    return int(counter.get_total_flops())


def ours(body: Body) -> tuple[int, int]:
    """typedflops' forward and predicted backward FLOPs on FlopCounterMode's kernels."""
    with record() as rec:
        body()
    assert rec.total.uncounted == ()
    return torch_counts(rec.session.root)


Kernel = Callable[[Tensor, Tensor, Tensor], Tensor]

#: ``F.scaled_dot_product_attention``'s kernels, called as torch calls them (causal).
KERNELS: dict[str, Kernel] = {
    "math": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "flash": lambda q, k, v: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0],
    "efficient": lambda q, k, v: aten._scaled_dot_product_efficient_attention(
        q, k, v, None, True, 0.0, True
    )[0],
    "cudnn": lambda q, k, v: aten._scaled_dot_product_cudnn_attention(
        q, k, v, None, True, 0.0, True
    )[0],
}
FUSED_OPS = {
    "flash": aten._scaled_dot_product_flash_attention,
    "efficient": aten._scaled_dot_product_efficient_attention,
    "cudnn": aten._scaled_dot_product_cudnn_attention,
    "cpu_flash": aten._scaled_dot_product_flash_attention_for_cpu,
}


def offsets(lengths: list[int], device: str = "cpu") -> Tensor:
    """Row offsets of jagged sequences of these lengths: 0, then their running sums."""
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=device)


def attention_flops(query: Any, key: Any, value: Any) -> int:
    """FlopCounterMode's forward formula for attention on these shapes (b, h, s, d)."""
    formula = cast(Callable[..., int], flop_counter.sdpa_flop_count)
    return formula(query, key, value)


def attention_backward_flops(grad_out: Any, query: Any, key: Any, value: Any) -> int:
    """FlopCounterMode's backward formula for attention on these shapes (b, h, s, d)."""
    formula = cast(Callable[..., int], flop_counter.sdpa_backward_flop_count)
    return formula(grad_out, query, key, value)
