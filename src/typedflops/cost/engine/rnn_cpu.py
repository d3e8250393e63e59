"""Torch's recurrent layers (``torch.gru``, ``torch.rnn_tanh``, ``torch.rnn_relu``,
``torch.lstm``) on ``meta`` as a CPU runs them.

Torch's recurrent layers take one path on a CPU and another on every other device without
a fused kernel, ``meta`` included:

- GRU and plain RNN layers (and LSTM layers oneDNN does not take: with projections, or in
  half precision with autograd on): on a CPU each layer multiplies the whole sequence by
  its input weights at once (one ``linear``) and then runs the cell on those products step
  by step; elsewhere the cell multiplies each step's input itself. The forward's FLOPs are
  equal, the backward's are not: step by step, the input weights' and biases' gradients
  are summed over the steps (``S - 1`` sums a layer).
- LSTM layers in float32 and bfloat16 (where the CPU has it): one fused oneDNN kernel a
  layer and direction (``mkldnn_rnn_layer``, counted by :mod:`.rnn_rules`), whose backward
  sums no gradients over steps.

A dry run for a CPU calls :func:`rnn_as_cpu`, which runs the ops the CPU's path runs (the
layers, directions, dropout between layers and batch-first transposes of torch's
``RNN.cpp`` and its oneDNN LSTM), so it counts, saves and differentiates what a CPU would.
Packed sequences take one path everywhere (no stand-in).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["is_rnn", "rnn_arguments", "rnn_as_cpu"]

_NAMES = frozenset({"gru", "rnn_tanh", "rnn_relu", "lstm"})
_LSTM_MODE = 2  # (oneDNN's and cuDNN's enum: RNN_RELU, RNN_TANH, LSTM, GRU)

# A layer's state: one tensor, or an LSTM's (h, c); a cell maps (the step's input products,
# the state, the layer's weights w_ih, w_hh, b_ih, b_hh, w_hr) to the next state.
_State = Tensor | tuple[Tensor, Tensor]
_Weights = Sequence[Tensor | None]
_Cell = Callable[[Tensor, Any, _Weights], Any]


def is_rnn(func: Any, args: tuple[Any, ...]) -> bool:
    """Whether ``func(*args)`` is torch's GRU, plain RNN or LSTM layer on a padded (not
    packed) sequence of ``meta`` tensors.

    >>> x = torch.empty(5, 2, 3, device="meta")
    >>> is_rnn(torch.gru, (x, x, [], True, 1, 0.0, False, False, False))
    True
    >>> is_rnn(torch.gru, (x, x, x, [], True, 1, 0.0, False, False))  # packed
    False
    """
    name = getattr(func, "__name__", None)
    if name not in _NAMES or func != getattr(torch._C._VariableFunctions, name):
        return False
    # the packed overloads take (data, batch_sizes, hx, params, ...)
    state = 1 if name == "lstm" else 2
    if len(args) <= state or not isinstance(args[state], list | tuple):
        return False
    return isinstance(args[0], Tensor) and args[0].device.type == "meta"


def _gru_cell(gates: Tensor, hidden: Tensor, weights: _Weights) -> Tensor:
    # torch's GRUCell with the input's products computed before (RNN.cpp)
    i_r, i_z, i_n = gates.unsafe_chunk(3, 1)
    h_r, h_z, h_n = _hidden_products(hidden, weights).unsafe_chunk(3, 1)
    reset = h_r.add_(i_r).sigmoid_()
    update = h_z.add_(i_z).sigmoid_()
    new = i_n.add(h_n.mul_(reset)).tanh_()
    return (hidden - new).mul_(update).add_(new)


def _lstm_cell(gates: Tensor, state: tuple[Tensor, Tensor], weights: _Weights) -> Any:
    # torch's LSTMCell with the input's products computed before (RNN.cpp)
    h, c = state
    i, f, g, o = _hidden_products(h, weights).add_(gates).unsafe_chunk(4, 1)
    i, f, g, o = i.sigmoid_(), f.sigmoid_(), g.tanh_(), o.sigmoid_()
    c = (f * c).add_(i * g)
    h = o * c.tanh()
    w_hr = weights[4]
    return (h if w_hr is None else torch.matmul(h, w_hr.t())), c


def _simple_cell(nonlinearity: Callable[[Tensor], Tensor]) -> _Cell:
    def cell(gates: Tensor, hidden: Tensor, weights: _Weights) -> Tensor:
        return nonlinearity(_hidden_products(hidden, weights).add_(gates))

    return cell


def _hidden_products(hidden: Tensor, weights: _Weights) -> Tensor:
    w_hh = weights[1]
    assert w_hh is not None
    return F.linear(hidden, w_hh, weights[3])


_CELLS: dict[str, _Cell] = {
    "gru": _gru_cell,
    "lstm": _lstm_cell,
    "rnn_tanh": _simple_cell(torch.tanh),
    "rnn_relu": _simple_cell(torch.relu),
}


def _direction(
    cell: _Cell, x: Tensor, state: Any, weights: _Weights, reverse: bool
) -> tuple[Tensor, Any]:
    """One direction of one layer: ``x`` (seq, batch, features) to (seq, batch, hidden),
    and the last state."""
    w_ih = weights[0]
    assert w_ih is not None
    steps = list(F.linear(x, w_ih, weights[2]).unbind(0))
    if reverse:
        steps.reverse()
    outputs = []
    for gates in steps:
        state = cell(gates, state, weights)
        outputs.append(state[0] if isinstance(state, tuple) else state)
    if reverse:
        outputs.reverse()
    return torch.stack(outputs, 0), state


def rnn_arguments(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments of torch's ``name`` layer (``"gru"``, ``"lstm"``...) by name, with each
    layer and direction's ``weights`` (w_ih, w_hh, b_ih, b_hh, w_hr: None where absent),
    whether an LSTM has ``projected`` states, and the ``stride`` of its flat weights."""
    names: tuple[str, ...] = ("input", "hx", "params", "has_biases", "num_layers", "dropout")
    names += ("train", "bidirectional", "batch_first")
    call = {**dict(zip(names, args, strict=False)), **kwargs}
    flat: list[Tensor] = list(call["params"])
    projected = name == "lstm" and call["hx"][0].shape[-1] != call["hx"][1].shape[-1]
    per = (4 if call["has_biases"] else 2) + projected
    groups: list[list[Tensor | None]] = []
    for at in range(0, len(flat), per):
        w_ih, w_hh, *rest = flat[at : at + per]
        b_ih, b_hh = rest[:2] if call["has_biases"] else (None, None)
        groups.append([w_ih, w_hh, b_ih, b_hh, rest[-1] if projected else None])
    call.update(weights=groups, projected=projected, stride=per)
    return call


def rnn_as_cpu(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` (:func:`is_rnn`) by the ops a CPU runs: ``(output, h_n)``
    (an LSTM's ``(output, h_n, c_n)``), output (seq, batch, directions * hidden) (batch
    first where asked), ``h_n`` (layers * directions, batch, hidden)."""
    name = func.__name__
    call = rnn_arguments(name, args, kwargs)
    if name == "lstm" and _fused_lstm(call):
        return _lstm_fused(call)
    x: Tensor = call["input"]
    if call["batch_first"]:
        x = x.transpose(0, 1)
    if name == "lstm":
        states: list[Any] = list(zip(call["hx"][0].unbind(0), call["hx"][1].unbind(0), strict=True))
    else:
        states = list(call["hx"].unbind(0))
    directions = 2 if call["bidirectional"] else 1
    layers = int(call["num_layers"])
    finals: list[Any] = []
    for layer in range(layers):
        outputs = []
        for d in range(directions):
            at = layer * directions + d
            out, last = _direction(_CELLS[name], x, states[at], call["weights"][at], d == 1)
            outputs.append(out)
            finals.append(last)
        x = outputs[0] if directions == 1 else torch.cat(outputs, outputs[0].dim() - 1)
        x = _dropout(call, x, layer)
    if name == "lstm":
        c_n = torch.stack([c for _, c in finals], 0)  # (c first, as C++ passes them)
        h_n = torch.stack([h for h, _ in finals], 0)
        return (x.transpose(0, 1) if call["batch_first"] else x), h_n, c_n
    h_n = torch.stack(finals, 0)
    if call["batch_first"]:
        x.transpose_(0, 1)
    return x, h_n


def _dropout(call: dict[str, Any], x: Tensor, layer: int) -> Tensor:
    p = float(call["dropout"])
    if p != 0 and call["train"] and layer < int(call["num_layers"]) - 1:
        return torch.dropout(x, p, True)
    return x


def _fused_lstm(call: dict[str, Any]) -> bool:
    """Whether a CPU runs this LSTM with oneDNN's fused layers (torch's ``use_mkldnn``)."""
    x: Tensor = call["input"]
    if call["projected"] or not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        return False
    if not torch.backends.mkldnn.enabled or x.numel() == 0:
        return False
    if x.dtype == torch.float32:
        return True
    if x.dtype == torch.bfloat16:
        return _cpu_has("bf16")
    if x.dtype == torch.float16:
        return not torch.is_grad_enabled() and _cpu_has("fp16")
    return False


@functools.cache
def _cpu_has(kind: str) -> bool:
    """Whether this CPU runs oneDNN in ``kind`` ("bf16" or "fp16"), asked of torch with
    every mode set aside."""
    with _disable_current_modes():
        ask = getattr(torch.ops.mkldnn, f"_is_mkldnn_{kind}_supported")
        return bool(ask())


def _lstm_fused(call: dict[str, Any]) -> tuple[Tensor, Tensor, Tensor]:
    """An LSTM as oneDNN runs it on a CPU: one ``mkldnn_rnn_layer`` per layer and
    direction."""
    x: Tensor = call["input"]
    if call["batch_first"]:
        x = x.transpose(0, 1)
    x = x.contiguous()
    h0, c0 = call["hx"]
    directions = 2 if call["bidirectional"] else 1
    layers = int(call["num_layers"])
    hs: list[Tensor] = []
    cs: list[Tensor] = []
    for layer in range(layers):
        outputs = []
        for d in range(directions):
            at = layer * directions + d
            h, c = h0.select(0, at), c0.select(0, at)
            w_ih, w_hh, b_ih, b_hh, _ = call["weights"][at]
            if b_ih is None or b_hh is None:  # (made right to left, as C++ passes them)
                b_hh = torch.zeros(w_hh.shape, dtype=w_hh.dtype, device=w_hh.device)
                b_ih = torch.zeros(w_ih.shape, dtype=w_ih.dtype, device=w_ih.device)
            out, h_n, c_n, _ = torch.mkldnn_rnn_layer(
                x, w_ih, w_hh, b_ih, b_hh, h, c, d == 1, [], _LSTM_MODE, w_hh.shape[1],
                layers, bool(call["has_biases"]), bool(call["bidirectional"]),
                bool(call["batch_first"]), bool(call["train"]),
            )  # fmt: skip
            outputs.append(out)
            hs.append(h_n)
            cs.append(c_n)
        x = outputs[0] if directions == 1 else torch.cat(outputs, -1)
        x = _dropout(call, x, layer)
    h_n, c_n = torch.stack(hs, 0), torch.stack(cs, 0)
    return (x.transpose(0, 1) if call["batch_first"] else x), h_n, c_n
