"""Ops whose meta kernel differs from what a device's kernel does in a way a count sees,
and how they run on meta here instead: the counting modes call :data:`RUNS`' function in
place of the op, and a backward's replay runs them through :class:`RunsAsDevice` (below
autograd, which records their nodes first).

- ``native_batch_norm`` not training (eval-mode BatchNorm): meta's kernel returns a mean
  and an inverse deviation per channel, where a CPU's and a GPU's return empty tensors (the
  running statistics serve): 8 bytes a channel (float32) a dry run counted as written and
  no device writes.
- ``native_layer_norm`` and ``native_batch_norm`` training, on float16 or bfloat16 inputs
  for a CPU: meta's kernel (as a GPU's) keeps float32 statistics, a CPU's keeps them at
  the input's dtype unless a parameter is float32 (2 bytes a row, or a channel, for each).
- ``_thnn_fused_lstm_cell`` without biases (a GPU's ``nn.LSTMCell(bias=False)``): meta's
  kernel reads each bias's device and fails (see :func:`.cuda_cells.fused_lstm_cell`).
- ``_embedding_bag`` and ``_embedding_bag_forward_only`` (``nn.EmbeddingBag``) for a CPU:
  torch's meta kernel gives a GPU's bookkeeping outputs (a bag per index, no maximum's
  index outside ``mode="max"``) where a CPU's kernel keeps none per index on its fast
  ``sum`` path and an index per bag otherwise (torch's own meta function gives these to a
  fake CPU tensor): 8 bytes an index, or a bag, a dry run for a CPU would count otherwise
  than the CPU writes. The device a dry run stands for is :func:`standing_for`'s, or else
  :func:`~.kernels.meta_target`'s.
- ``mm``, ``addmm``, ``addbmm``, ``mv`` and ``convolution`` of operands of different
  dtypes (a float16 layer given a float32 input): meta's kernels take them, every device's
  refuses; here meta refuses them too, so a dry run fails where a real run does.
- The constructors of strided nested tensors (``torch.nested.nested_tensor`` of a list,
  ``_nested_from_padded``, ...): their storage must be a device's, and torch's check of
  that fails inside the tensor's constructor on meta; here they are refused before (an
  op with no kernel on shapes alone, named so), and so under FakeTensorMode too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, UnsupportedOperatorException
from torch.utils._python_dispatch import TorchDispatchMode

from .cuda_cells import fused_lstm_cell
from .standing import standing_for, stands_for

__all__ = ["REFUSED_ONLY", "RUNS", "RunsAsDevice", "standing_for", "stands_for"]

aten = torch.ops.aten


def _batch_norm(op: Any) -> Any:
    """``native_batch_norm`` (``_native_batch_norm_legit`` with running statistics: ``op``);
    on meta, not training, with the empty statistics a device's kernel returns, and in
    training with the statistics' dtype of the device stood for."""

    def run(
        x: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        running_mean: torch.Tensor | None,
        running_var: torch.Tensor | None,
        training: bool,
        momentum: float,
        eps: float,
    ) -> Any:
        out = op(x, weight, bias, running_mean, running_var, training, momentum, eps)
        if not x.is_meta:
            return out
        if not training:
            return _without_statistics(out)
        return _cpu_statistics(out, x, (weight, bias, running_mean, running_var))

    return run


def _layer_norm(
    x: torch.Tensor,
    normalized_shape: list[int],
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> Any:
    """``native_layer_norm``; on meta for a CPU, with the CPU's statistics' dtype."""
    out = aten.native_layer_norm.default(x, normalized_shape, weight, bias, eps)
    return _cpu_statistics(out, x, (weight, bias)) if x.is_meta else out


_REDUCED = (torch.float16, torch.bfloat16)


def _cpu_statistics(out: Any, x: torch.Tensor, params: tuple[torch.Tensor | None, ...]) -> Any:
    """A norm's output and saved statistics, the statistics at a CPU's dtype for a CPU: a
    GPU (and meta) keeps float32 statistics of float16 and bfloat16 inputs, a CPU keeps them
    at the input's dtype unless a parameter is float32 (a mixed-precision norm)."""
    if x.dtype not in _REDUCED or stands_for() != "cpu":
        return out
    if any(p is not None and p.dtype == torch.float32 for p in params):
        return out
    return out[0], *(saved.to(x.dtype) for saved in out[1:])


def _batch_norm_no_training(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    momentum: float,
    eps: float,
) -> Any:
    """``_native_batch_norm_legit_no_training``, as :func:`_batch_norm` not training."""
    out = aten._native_batch_norm_legit_no_training.default(
        x, weight, bias, running_mean, running_var, momentum, eps
    )
    return _without_statistics(out) if x.is_meta else out


def _without_statistics(out: Any) -> Any:
    """A batch norm's output, with the empty mean and inverse deviation a device gives."""
    return out[0], out[1].new_empty((0,)), out[2].new_empty((0,))


_SUM, _MAX = 0, 2


def _embedding_bag(
    weight: torch.Tensor,
    indices: torch.Tensor,
    offsets: torch.Tensor,
    scale_grad_by_freq: bool = False,
    mode: int = 0,
    sparse: bool = False,
    per_sample_weights: torch.Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int = -1,
) -> Any:
    """``_embedding_bag``; on meta for a CPU, with the bookkeeping outputs a CPU's kernel
    writes (as torch's meta function gives them to a CPU's fake tensors)."""
    out = aten._embedding_bag.default(
        weight,
        indices,
        offsets,
        scale_grad_by_freq,
        mode,
        sparse,
        per_sample_weights,
        include_last_offset,
        padding_idx,
    )
    if not weight.is_meta or stands_for() != "cpu":
        return out
    output, offset2bag, bag_size, max_indices = out
    fast = (
        weight.dtype in (torch.float32, torch.float16, torch.bfloat16)
        and weight.stride(1) == 1
        and output.stride(1) == 1
        and padding_idx < 0
        and (per_sample_weights is None or per_sample_weights.stride(0) == 1)
    )
    if mode == _SUM and fast:
        offset2bag = offsets.new_empty((0,))
    else:
        offset2bag = offsets.new_empty((indices.shape[0],))
    bags = output.shape[0]
    bag_size = offsets.new_empty((bags,))
    if mode == _MAX:
        max_indices = offsets.new_empty((bags, weight.shape[1]))
    else:
        max_indices = offsets.new_empty((bags,))
    return output, offset2bag, bag_size, max_indices


def _embedding_bag_forward_only(*args: Any, **kwargs: Any) -> Any:
    """``_embedding_bag_forward_only``, as :func:`_embedding_bag`."""
    if not args[0].is_meta or stands_for() != "cpu":
        return aten._embedding_bag_forward_only.default(*args, **kwargs)
    return _embedding_bag(*args, **kwargs)


def _same_dtype(op: Any, operands: int) -> Any:
    """``op``, refusing on meta what every device refuses: its first ``operands`` tensors
    of different dtypes (meta's kernels of these take them, and a dry run counted a call
    that cannot run)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        tensors = [a for a in args[:operands] if isinstance(a, torch.Tensor)]
        fake = tensors and (tensors[0].is_meta or isinstance(tensors[0], FakeTensor))
        if fake and not torch._C._is_any_autocast_enabled():  # (autocast: cast on a device)
            dtypes = {t.dtype for t in tensors}
            if len(dtypes) > 1:
                found = " and ".join(str(t.dtype).removeprefix("torch.") for t in tensors)
                raise RuntimeError(
                    f"{op._overloadpacket.__name__}: expected its operands to have the same "
                    f"dtype, but got {found}"
                )
        return op(*args, **kwargs)

    return run


def _real_storage_only(op: Any) -> Any:
    """``op`` (a strided nested tensor's constructor) refused where a tensor it is given is
    meta or fake, before it is called; run as it is on tensors with values."""

    def run(*args: Any, **kwargs: Any) -> Any:
        given = [*args, *kwargs.values()]
        tensors = [t for a in given for t in (a if isinstance(a, list | tuple) else [a])]
        if any(
            isinstance(t, torch.Tensor) and (t.is_meta or isinstance(t, FakeTensor))
            for t in tensors
        ):
            raise UnsupportedOperatorException(op)
        return op(*args, **kwargs)

    return run


_NESTED_CONSTRUCTORS = [
    aten._nested_tensor_from_tensor_list.default,
    aten._nested_from_padded.default,
    aten._nested_from_padded_and_nested_example.default,
    aten._nested_tensor_from_mask.default,
    aten._nested_view_from_buffer.default,
    aten._nested_view_from_buffer_copy.default,
]

#: What runs an op on meta in place of calling it (see the module).
RUNS: dict[Any, Any] = {
    **{op: _real_storage_only(op) for op in _NESTED_CONSTRUCTORS},
    aten.mm.default: _same_dtype(aten.mm.default, 2),
    aten.addmm.default: _same_dtype(aten.addmm.default, 3),
    aten.addbmm.default: _same_dtype(aten.addbmm.default, 3),
    aten.mv.default: _same_dtype(aten.mv.default, 2),
    aten.convolution.default: _same_dtype(aten.convolution.default, 2),
    aten._thnn_fused_lstm_cell.default: fused_lstm_cell,
    aten.native_batch_norm.default: _batch_norm(aten.native_batch_norm.default),
    aten._native_batch_norm_legit_no_training.default: _batch_norm_no_training,
    aten._native_batch_norm_legit.default: _batch_norm(aten._native_batch_norm_legit.default),
    aten.native_layer_norm.default: _layer_norm,
    aten._embedding_bag.default: _embedding_bag,
    aten._embedding_bag_forward_only.default: _embedding_bag_forward_only,
}


#: The ops of :data:`RUNS` run otherwise only to refuse what every device refuses: on a
#: tensor that is not meta (nor fake) they run as they are, and their outputs are the
#: op's own (a function of their arguments, whatever the device stood for).
REFUSED_ONLY = frozenset(
    {
        aten.mm.default,
        aten.addmm.default,
        aten.addbmm.default,
        aten.mv.default,
        aten.convolution.default,
    }
)


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
