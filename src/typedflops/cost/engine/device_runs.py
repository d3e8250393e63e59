"""Ops whose meta kernel differs from what a device's kernel does in a way a count sees,
and how they run on meta here instead: the counting modes call :data:`RUNS`' function in
place of the op, and a backward's replay runs them through :class:`RunsAsDevice` (below
autograd, which records their nodes first).

- ``native_batch_norm`` not training (eval-mode BatchNorm): meta's kernel returns a mean
  and an inverse deviation per channel, where a CPU's and a GPU's return empty tensors (the
  running statistics serve): 8 bytes a channel (float32) a dry run counted as written and
  no device writes.
- ``_thnn_fused_lstm_cell`` without biases (a GPU's ``nn.LSTMCell(bias=False)``): meta's
  kernel reads each bias's device and fails (see :func:`.cuda_cells.fused_lstm_cell`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .cuda_cells import fused_lstm_cell

__all__ = ["RUNS", "RunsAsDevice"]

aten = torch.ops.aten


def _batch_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
) -> Any:
    """``native_batch_norm``; on meta, not training, with the empty statistics a device's
    kernel returns."""
    out = aten.native_batch_norm.default(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    return out if training or not x.is_meta else _without_statistics(out)


def _batch_norm_no_training(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    momentum: float,
    eps: float,
) -> Any:
    """``_native_batch_norm_legit_no_training``, as :func:`_batch_norm`."""
    out = aten._native_batch_norm_legit_no_training.default(
        x, weight, bias, running_mean, running_var, momentum, eps
    )
    return _without_statistics(out) if x.is_meta else out


def _without_statistics(out: Any) -> Any:
    """A batch norm's output, with the empty mean and inverse deviation a device gives."""
    return out[0], out[1].new_empty((0,)), out[2].new_empty((0,))


#: What runs an op on meta in place of calling it (see the module).
RUNS: dict[Any, Any] = {
    aten._thnn_fused_lstm_cell.default: fused_lstm_cell,
    aten.native_batch_norm.default: _batch_norm,
    aten._native_batch_norm_legit_no_training.default: _batch_norm_no_training,
}


class RunsAsDevice(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Runs the ops of :data:`RUNS` as it says, below autograd (which records their nodes
    first): a replay's call of one, outside any counting mode."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return RUNS.get(func, func)(*args, **(kwargs or {}))
