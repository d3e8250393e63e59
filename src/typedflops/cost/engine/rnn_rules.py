"""The FLOP rules of the fused recurrent kernels torch runs for ``nn.LSTM`` on a CPU
(oneDNN's ``mkldnn_rnn_layer``, one layer in one direction), counted as the same LSTM is
counted where torch runs it step by step (on ``meta``, in a dry run): one model, one count.
The conventions they follow are written in :mod:`.rules`.

Per step of each sequence, with I input and H hidden features: the gates' two products,
``8H·(I + H)`` (a matrix product's 2·m·n·k; the biases are not counted, as ``addmm``'s are
not), and 13H elementwise (the two products' sum 4H, three sigmoids and a tanh 4H, the cell
``f·c + i·g`` 3H, the output ``o·tanh(c)`` 2H): ``B·S·(8H·(I + H) + 13H)``, as
``nn.LSTMCell`` run S times. FlopCounterMode has no formula for these kernels (0), and
counts the step-by-step path's products only, ``B·S·8H·(I + H)``.

The backward counts the gradients autograd asks for, as the step-by-step path computes
them (the fused kernel computes every gradient whether asked or not): the weights' ``8H·(I +
H)`` per step, the input's ``8H·I`` where the input requires grad, the hidden state's
``8H²`` per step after the first (and at the first where the initial state requires grad),
and 11H elementwise per step (less H at the first step, where the initial cell state needs
no gradient), 8H more for the two biases' gradients.

Of these counts, the matrix products' part (:func:`rnn_matmul_parts`, the ``matmul`` term
of a Cost) is what the step-by-step path runs as ``addmm``/``mm``: the gates' products
``8H·(I + H)`` per step forward; backward, the weights' gradients, the input's and the
hidden state's through ``w_hh``, without the elementwise ops and the biases' sums.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .opcall import OpCall, Rule
from .tensors import is_float

__all__ = ["rnn_matmul_parts", "rnn_rules"]

aten = torch.ops.aten

_LSTM = 2  # the mode of cuDNN's and oneDNN's enum: RNN_RELU, RNN_TANH, LSTM, GRU


def _lstm_only(mode: Any) -> None:
    if mode != _LSTM:  # (torch runs its GRU and plain RNN on a CPU step by step)
        raise NotImplementedError(f"a fused recurrent kernel in mode {mode}")


def _lstm_layer(call: OpCall) -> Any:
    x = call.inputs[0]  # (input, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, batch_sizes, mode,
    #                     hidden_size, ...)
    if not is_float(x):
        return 0
    return _lstm_layer_products(call) + _steps(call) * 13 * call.arg(10, "hidden_size")


def _lstm_layer_products(call: OpCall) -> Any:
    """The forward's gates' two products: ``8H·(I + H)`` per step."""
    x = call.inputs[0]
    if not is_float(x):
        return 0
    _lstm_only(call.arg(9, "mode"))
    hidden, features = call.arg(10, "hidden_size"), x.shape[-1]
    return _steps(call) * 8 * hidden * (features + hidden)


def _steps(call: OpCall) -> Any:
    return math.prod(call.inputs[0].shape[:-1])  # sequence x batch


def _lstm_layer_backward(call: OpCall) -> Any:
    x, b_ih, b_hh, cx = call.args[0], call.args[3], call.args[4], call.args[6]
    if not is_float(x):
        return 0
    count = _lstm_layer_backward_products(call)
    hidden = call.arg(15, "hidden_size")
    batch = math.prod(x.shape[1:-1])  # (sequence, batch, features)
    steps = math.prod(x.shape[:-1])
    if bool(call.arg(17, "has_biases")):
        count += steps * 4 * hidden * (b_ih.requires_grad + b_hh.requires_grad)
    # the cell's gradient at every step but the first
    count += steps * 11 * hidden - batch * hidden
    if cx.requires_grad:
        count += batch * hidden
    return count


def _lstm_layer_backward_products(call: OpCall) -> Any:
    """The backward's products: the weights' gradients, the input's, and the hidden
    state's through ``w_hh`` at every step but the first (and the first's where the
    initial state requires grad)."""
    x, w_ih, w_hh, hx = call.args[0], call.args[1], call.args[2], call.args[5]
    if not is_float(x):
        return 0
    _lstm_only(call.arg(14, "mode"))
    hidden, features = call.arg(15, "hidden_size"), x.shape[-1]
    batch = math.prod(x.shape[1:-1])  # (sequence, batch, features)
    steps = math.prod(x.shape[:-1])
    count = steps * 8 * hidden * (features * w_ih.requires_grad + hidden * w_hh.requires_grad)
    if x.requires_grad:
        count += steps * 8 * hidden * features
    count += (steps - batch) * 8 * hidden * hidden
    if hx.requires_grad:
        count += batch * 8 * hidden * hidden
    return count


def rnn_rules() -> dict[Any, Rule]:
    """The rules of this module, by the op each counts."""
    return {
        aten.mkldnn_rnn_layer: _lstm_layer,
        aten.mkldnn_rnn_layer_backward: _lstm_layer_backward,
    }


def rnn_matmul_parts() -> dict[Any, Rule]:
    """The matrix products' part of each rule of this module, by the op it counts."""
    return {
        aten.mkldnn_rnn_layer: _lstm_layer_products,
        aten.mkldnn_rnn_layer_backward: _lstm_layer_backward_products,
    }
