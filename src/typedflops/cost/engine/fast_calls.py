"""The Python bindings that run a few common ops for ``record()``'s counting mode.

Inside ``__torch_dispatch__`` an op runs its kernel by calling the op again with the mode
off. ``OpOverload._op`` parses its arguments against the schema; the bindings torch
generates for ``torch.mm`` or ``Tensor.view`` parse the same arguments faster (on small
tensors, about a third of a microsecond of the two to three an op costs a record). Each
binding here resolves to exactly the overload it stands for when given that overload's
positional arguments, as many as listed and no keywords (tests/cost/test_fast_calls.py
checks each against the op torch dispatches); any other call of the op goes through
``_op``. Autograd, autocast and the modes above the counting mode are already past when
it runs, as they are for ``_op``: both enter torch's dispatcher with the same keys off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["FAST_CALLS"]

_aten = torch.ops.aten
_VF: Any = torch._C._VariableFunctions
_NN: Any = torch._C._nn
_T: Any = torch.Tensor

#: Ops by the binding that runs them and the number of positional arguments it takes.
FAST_CALLS: dict[Any, tuple[Callable[..., Any], int]] = {
    _aten.mm.default: (_VF.mm, 2),
    _aten.bmm.default: (_VF.bmm, 2),
    _aten.addmm.default: (_VF.addmm, 3),
    _aten.add.Tensor: (_VF.add, 2),
    _aten.sub.Tensor: (_VF.sub, 2),
    _aten.mul.Tensor: (_VF.mul, 2),
    _aten.div.Tensor: (_VF.div, 2),
    _aten.where.self: (_VF.where, 3),
    _aten.relu.default: (_VF.relu, 1),
    _aten.tanh.default: (_VF.tanh, 1),
    _aten.sigmoid.default: (_VF.sigmoid, 1),
    _aten.exp.default: (_VF.exp, 1),
    _aten.neg.default: (_VF.neg, 1),
    _aten.rsqrt.default: (_VF.rsqrt, 1),
    _aten.gelu.default: (_NN.gelu, 1),
    _aten.silu.default: (_NN.silu, 1),
    _aten.pow.Tensor_Scalar: (_VF.pow, 2),
    _aten.sum.dim_IntList: (_VF.sum, 3),
    _aten.mean.dim: (_VF.mean, 3),
    _aten._softmax.default: (_VF._softmax, 3),
    _aten._log_softmax.default: (_VF._log_softmax, 3),
    _aten._safe_softmax.default: (_VF._safe_softmax, 2),
    _aten._softmax_backward_data.default: (_VF._softmax_backward_data, 4),
    _aten.native_layer_norm.default: (_VF.native_layer_norm, 5),
    _aten.embedding.default: (_VF.embedding, 2),
    _aten.convolution.default: (_VF.convolution, 9),
    _aten.cat.default: (_VF.cat, 2),
    _aten.clone.default: (_VF.clone, 1),
    _aten.detach.default: (_VF.detach, 1),
    _aten.t.default: (_VF.t, 1),
    _aten.transpose.int: (_VF.transpose, 3),
    _aten.permute.default: (_VF.permute, 2),
    _aten.unsqueeze.default: (_VF.unsqueeze, 2),
    _aten.squeeze.dim: (_VF.squeeze, 2),
    _aten.select.int: (_VF.select, 3),
    _aten.view.default: (_T.view, 2),
    _aten.expand.default: (_T.expand, 2),
}
