"""cuDNN's recurrent kernels (``_cudnn_rnn`` and its backward: ``nn.LSTM``, ``nn.GRU`` and
``nn.RNN`` on a GPU): their FLOP rules, a meta kernel for the backward (torch has none, so
that a backward is predicted from shapes), and the call a dry run for a GPU makes on meta.

One kernel runs every layer and direction over the whole sequence. It is counted as what it
computes, with the elementwise ops of each cell counted as a CPU's ops count the same cell
(:mod:`.rnn_cpu`, :mod:`.rnn_rules`). With G gates (LSTM 4, GRU 3, RNN 1), H hidden and I_l
input features of layer l (I, then directions·H), over the P positions (sequence x batch)
of each layer and direction:

- forward: the input and hidden products ``2GH·(I_l + H)`` a position, and the cell's
  elementwise ops, LSTM 13H, GRU 10H, RNN 2H; dropout between layers (training) 2 a value.
- backward, the gradients autograd asks for: the weights' ``2GH·(I_l + H)`` and the biases'
  ``2GH`` a position; the layer's input's ``2GH·I_l`` a position where it needs one (the
  first layer's where the input requires grad; every upper layer's where anything below
  does), and the two directions' gradients of it summed; the hidden state's ``2GH·H`` a
  position after the first step (at the first too where ``h0`` requires grad); the cell's
  elementwise ops, LSTM and GRU 11H, RNN 2H a position, less H (GRU 2H) at the first step
  (an LSTM's where ``c0`` needs no gradient, a GRU's H less where ``h0`` needs one, an
  RNN's always); dropout 1 a value. A CPU's autograd also sums the gradients of ``h0``
  selected for each layer and direction; cuDNN hands back one.

A CPU's GRU and RNN layers compute the hidden weights' gradient step by step and sum it
(``S - 1`` sums of ``GH·(H + 1)``); cuDNN computes it over the sequence at once, as oneDNN's
LSTM does. LSTMs with projections are not counted here (listed uncounted).
"""

from __future__ import annotations

from typing import Any

import torch

from .opcall import OpCall, Rule
from .rnn_cpu import rnn_arguments
from .tensors import is_float

__all__ = [
    "cudnn_rnn_matmul_parts",
    "cudnn_rnn_rules",
    "is_cudnn_target",
    "rnn_as_cudnn",
    "with_weight_buffer",
]

aten = torch.ops.aten

# cuDNN's modes: RNN_RELU, RNN_TANH, LSTM, GRU
_GATES = {0: 1, 1: 1, 2: 4, 3: 3}
_CELL_FORWARD = {0: 2, 1: 2, 2: 13, 3: 10}
_CELL_BACKWARD = {0: 2, 1: 2, 2: 11, 3: 11}
_FIRST_STEP = {0: 1, 1: 1, 2: 1, 3: 2}  # a first step's ops fewer, per hidden value
_MODES = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}


class _Layout:
    """What one ``_cudnn_rnn`` call (or its backward, from ``shift`` on) runs."""

    def __init__(self, call: OpCall, shift: int) -> None:
        x = call.inputs[0]
        self.float = is_float(x)
        self.mode = int(call.arg(6 + shift, "mode"))
        self.hidden = call.arg(7 + shift, "hidden_size")
        if call.arg(8 + shift, "proj_size"):
            raise NotImplementedError("cuDNN's LSTM with projections")
        self.layers = int(call.arg(9 + shift, "num_layers"))
        batch_first = bool(call.arg(10 + shift, "batch_first"))
        self.dropout = float(call.arg(11 + shift, "dropout")) * bool(call.arg(12 + shift, "train"))
        self.directions = 2 if call.arg(13 + shift, "bidirectional") else 1
        batch_sizes = list(call.arg(14 + shift, "batch_sizes") or [])
        if batch_sizes:  # packed: (positions, features)
            self.positions, self.first = x.shape[0], batch_sizes[0]
        else:
            self.positions = x.shape[0] * x.shape[1]
            self.first = x.shape[0] if batch_first else x.shape[1]
        weights, stride = call.args[1], int(call.arg(2, "weight_stride0"))
        firsts = range(0, self.layers * self.directions * stride, self.directions * stride)
        self.features = [weights[at].shape[1] for at in firsts]
        self.biases = stride == 4
        self.gates = _GATES[self.mode] * self.hidden

    def between_layers(self) -> Any:
        """Values dropout reads (each layer's output but the last's)."""
        return (self.layers - 1) * self.positions * self.directions * self.hidden


def _forward_parts(call: OpCall) -> tuple[Any, Any]:
    """The forward's FLOPs and their matrix products' part."""
    run = _Layout(call, 0)
    if not run.float:
        return 0, 0
    positions = run.directions * run.positions
    products = positions * sum(2 * run.gates * (inputs + run.hidden) for inputs in run.features)
    cells = positions * run.layers * _CELL_FORWARD[run.mode] * run.hidden
    return products + cells + (2 * run.between_layers() if run.dropout else 0), products


def _backward_parts(call: OpCall) -> tuple[Any, Any]:
    """The backward's FLOPs and their matrix products' part."""
    run = _Layout(call, 4)
    if not run.float:
        return 0, 0
    input_grad, hx_grad, cx_grad, weights_grad = (bool(m) for m in call.arg(21, "output_mask"))
    h, g, p, first = run.hidden, run.gates, run.positions, run.first
    # the first step's ops an initial state needing a gradient adds back: an LSTM's c0's,
    # a GRU's h0's (an RNN's first step has one op fewer either way: no sum of its state)
    initial = {2: cx_grad, 3: hx_grad}.get(run.mode, False)
    below = weights_grad or hx_grad or cx_grad  # (what a lower layer needs a gradient for)
    products = others = 0
    for layer, inputs in enumerate(run.features):
        if weights_grad:
            products += run.directions * p * 2 * g * (inputs + h)
            others += run.directions * p * 2 * g if run.biases else 0
        if input_grad or (layer > 0 and below):
            products += run.directions * p * 2 * g * inputs
            others += (run.directions - 1) * p * inputs  # the two directions' sums
        # the hidden state's gradient after the first step (and at it, where h0 needs one)
        products += run.directions * (p - first + (first if hx_grad else 0)) * 2 * g * h
        cells = p * _CELL_BACKWARD[run.mode] - first * (_FIRST_STEP[run.mode] - initial)
        others += run.directions * cells * h
    dropout = run.between_layers() if run.dropout else 0
    return products + others + dropout, products


def cudnn_rnn_rules() -> dict[Any, Rule]:
    """The rules of this module, by the op each counts."""
    return {
        aten._cudnn_rnn: lambda call: _forward_parts(call)[0],
        aten._cudnn_rnn_backward: lambda call: _backward_parts(call)[0],
    }


def cudnn_rnn_matmul_parts() -> dict[Any, Rule]:
    """The matrix products' part of each rule of this module, by the op it counts."""
    return {
        aten._cudnn_rnn: lambda call: _forward_parts(call)[1],
        aten._cudnn_rnn_backward: lambda call: _backward_parts(call)[1],
    }


# -- a meta kernel for the backward --------------------------------------------------------


def _backward_on_meta(
    input: torch.Tensor,
    weight: list[torch.Tensor],
    weight_stride0: int,
    weight_buf: torch.Tensor,
    hx: torch.Tensor,
    cx: torch.Tensor | None,
    *rest: Any,
) -> tuple[Any, ...]:
    output_mask = rest[-1]
    grads = [torch.empty_like(w) for w in weight] if output_mask[3] else []
    grad_cx = torch.empty_like(cx) if cx is not None else None
    return torch.empty_like(input), torch.empty_like(hx), grad_cx, grads


_LIBRARY: torch.library.Library | None = None
if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_cudnn_rnn_backward", "Meta"):
    _LIBRARY = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]
    _LIBRARY.impl("_cudnn_rnn_backward", _backward_on_meta, "Meta")  # type: ignore[no-untyped-call]


def with_weight_buffer(func: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments of an op replayed on meta to find its backward: a ``_cudnn_rnn`` given
    no weight buffer (weights cuDNN could not take in place, as bfloat16 ones) is given one.
    On a GPU the kernel packs the weights into a buffer of its own and hands it to the
    backward; on meta torch hands on none, and the backward refuses to run without it."""
    if func is not aten._cudnn_rnn.default or args[3] is not None:
        return args
    weights = args[1]
    buffer = torch.empty(sum(w.numel() for w in weights), dtype=weights[0].dtype)
    return (*args[:3], buffer, *args[4:])


# -- the call a dry run for a GPU makes ----------------------------------------------------


def is_cudnn_target(args: tuple[Any, ...]) -> bool:
    """Whether a GPU runs this recurrent layer (:func:`~.rnn_cpu.is_rnn`) with cuDNN: cuDNN
    enabled, floating-point values."""
    return bool(torch.backends.cudnn.enabled) and args[0].dtype in _CUDNN_DTYPES


_CUDNN_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def rnn_as_cudnn(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` (torch's GRU, RNN or LSTM layer on meta tensors) as a GPU
    runs it: one ``_cudnn_rnn`` over every layer and direction, its weights in one buffer.
    ``(output, h_n)``, an LSTM's ``(output, h_n, c_n)``."""
    name = func.__name__
    call = rnn_arguments(name, args, kwargs)
    x: torch.Tensor = call["input"]
    hx, cx = call["hx"] if name == "lstm" else (call["hx"], None)
    weights: list[torch.Tensor] = list(call["params"])
    w_hh, w_hr = call["weights"][0][1], call["weights"][0][4]
    buffer = torch.empty(sum(w.numel() for w in weights), dtype=x.dtype, device=x.device)
    mode = _MODES[name]
    out = torch._cudnn_rnn(
        x, weights, call["stride"], buffer, hx, cx, mode, w_hh.shape[0] // _GATES[mode],
        0 if w_hr is None else w_hr.shape[0], int(call["num_layers"]),
        bool(call["batch_first"]), float(call["dropout"]), bool(call["train"]),
        bool(call["bidirectional"]), [], None,
    )  # fmt: skip
    return (out[0], out[1], out[2]) if name == "lstm" else (out[0], out[1])
