"""CUDA's fused LSTM and GRU cells (``nn.LSTMCell``, ``nn.GRUCell`` on a GPU: the two
products, then one kernel for the gates): their FLOP rules, meta kernels torch lacks for
the GRU cell, and the call a dry run for a GPU makes on meta.

Per row of the batch, with H hidden features, the cell's elementwise ops are counted as a
CPU counts the same cell (the biases' adds not counted, as ``addmm``'s are not): forward
LSTM 13H, GRU 10H. Backward, what the kernel computes: every gradient of the cell, the
initial state's included, LSTM 11H, GRU 10H, and the biases' gradients as sums over the
batch (LSTM one sum of 4H, handed to both biases; GRU two of 3H). The products around the
cell (``mm``) are counted as products.
"""

from __future__ import annotations

from typing import Any

import torch

from .opcall import OpCall, Rule
from .tensors import is_float

__all__ = ["cell_as_cuda", "cuda_cell_rules", "fused_lstm_cell", "is_cell"]

aten = torch.ops.aten


def _lstm_cell(call: OpCall) -> Any:
    cx = call.arg(2, "cx")
    return 13 * cx.shape[0] * cx.shape[1] if is_float(cx) else 0


def _lstm_cell_backward(call: OpCall) -> Any:
    cx = call.arg(2, "cx")
    rows, hidden = cx.shape[0], cx.shape[1]
    biases = 4 * hidden * rows if call.arg(5, "has_bias") else 0
    return 11 * rows * hidden + biases if is_float(cx) else 0


def _gru_cell(call: OpCall) -> Any:
    hx = call.arg(2, "hx")
    return 10 * hx.shape[0] * hx.shape[1] if is_float(hx) else 0


def _gru_cell_backward(call: OpCall) -> Any:
    grad = call.arg(0, "grad_hy")
    rows, hidden = grad.shape[0], grad.shape[1]
    biases = 2 * 3 * hidden * rows if call.arg(2, "has_bias") else 0
    return 10 * rows * hidden + biases if is_float(grad) else 0


def cuda_cell_rules() -> dict[Any, Rule]:
    """The rules of this module, by the op each counts."""
    return {
        aten._thnn_fused_lstm_cell: _lstm_cell,
        aten._thnn_fused_lstm_cell_backward_impl: _lstm_cell_backward,
        aten._thnn_fused_gru_cell: _gru_cell,
        aten._thnn_fused_gru_cell_backward: _gru_cell_backward,
    }


# -- meta kernels for the GRU cell ----------------------------------------------------------

_GRU_WORKSPACE = 5  # (CUDA's kernel keeps 5 values a hidden feature for backward)


def _gru_cell_on_meta(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    hx: torch.Tensor,
    input_bias: torch.Tensor | None = None,
    hidden_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    rows, hidden = hx.shape
    workspace = hx.new_empty((rows, hidden * _GRU_WORKSPACE))
    return torch.empty_like(hx), workspace


def _gru_cell_backward_on_meta(
    grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool
) -> tuple[Any, ...]:
    rows, hidden = grad_hy.shape
    gates = grad_hy.new_empty((rows, 3 * hidden))
    biases = (grad_hy.new_empty((3 * hidden,)), grad_hy.new_empty((3 * hidden,)))
    none = (None, None)
    return (
        gates,
        torch.empty_like(gates),
        torch.empty_like(grad_hy),
        *(biases if has_bias else none),
    )


_LIBRARY: torch.library.Library | None = None
for _name, _kernel in (
    ("_thnn_fused_gru_cell", _gru_cell_on_meta),
    ("_thnn_fused_gru_cell_backward", _gru_cell_backward_on_meta),
):
    if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{_name}", "Meta"):
        if _LIBRARY is None:
            _LIBRARY = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]
        _LIBRARY.impl(_name, _kernel, "Meta")  # type: ignore[no-untyped-call]


# -- an LSTM cell without biases on meta ---------------------------------------------------


def fused_lstm_cell(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    cx: torch.Tensor,
    input_bias: torch.Tensor | None = None,
    hidden_bias: torch.Tensor | None = None,
) -> Any:
    """``_thnn_fused_lstm_cell``, on meta tensors without biases too: torch's meta kernel
    reads each bias's device, where a GPU's kernel takes none (a bias-less ``nn.LSTMCell``).
    ``(hy, cy, workspace)``; the autograd node made above it hands its backward no biases."""
    if input_bias is None and input_gates.is_meta:
        contiguous = torch.contiguous_format
        return (
            torch.empty_like(cx, memory_format=contiguous),
            torch.empty_like(cx, memory_format=contiguous),
            torch.empty_like(input_gates, memory_format=contiguous),
        )
    return aten._thnn_fused_lstm_cell.default(
        input_gates, hidden_gates, cx, input_bias, hidden_bias
    )


# -- the call a dry run for a GPU makes ----------------------------------------------------


def is_cell(func: Any, args: tuple[Any, ...]) -> bool:
    """Whether ``func(*args)`` is torch's LSTM or GRU cell on ``meta`` tensors."""
    name = getattr(func, "__name__", None)
    if name not in ("lstm_cell", "gru_cell"):
        return False
    if func != getattr(torch._C._VariableFunctions, name):
        return False
    return isinstance(args[0], torch.Tensor) and args[0].device.type == "meta"


def cell_as_cuda(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``torch.lstm_cell`` / ``torch.gru_cell`` on meta tensors as a GPU runs it: the input's
    and the state's products (``matmul``), then the fused cell. An LSTM's ``(h, c)``, a GRU's
    ``h``."""
    names = ("input", "hx", "w_ih", "w_hh", "b_ih", "b_hh")
    call = {"b_ih": None, "b_hh": None, **dict(zip(names, args, strict=False)), **kwargs}
    x, w_ih, w_hh = call["input"], call["w_ih"], call["w_hh"]
    if func.__name__ == "lstm_cell":
        h, c = call["hx"]
        input_gates = torch.matmul(x, w_ih.t())
        hidden_gates = torch.matmul(h, w_hh.t())
        hy, cy, _ = aten._thnn_fused_lstm_cell(
            input_gates, hidden_gates, c, call["b_ih"], call["b_hh"]
        )
        return hy, cy
    h = call["hx"]
    input_gates = torch.matmul(x, w_ih.t())
    hidden_gates = torch.matmul(h, w_hh.t())
    hy, _ = aten._thnn_fused_gru_cell(input_gates, hidden_gates, h, call["b_ih"], call["b_hh"])
    return hy
