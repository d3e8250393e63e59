"""Memory accounting: tensor sizes, shared storage, and a model's training-state bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .training import TrainingMemory

__all__ = ["OPTIMIZER_STATES", "model_memory", "nbytes", "same_storage", "training_memory"]

#: Tensors of optimizer state kept per parameter (Adam: first and second moments).
OPTIMIZER_STATES: dict[str | None, int] = {
    None: 0,
    "sgd": 0,
    "momentum": 1,
    "adagrad": 1,
    "rmsprop": 1,
    "adam": 2,
    "adamw": 2,
}


def nbytes(x: torch.Tensor) -> int:
    """Bytes of the elements of ``x`` (any shape): ``numel * element_size``; for a nested
    (jagged) or sparse tensor, of the values it holds. The cost rules count bytes with it.

    >>> nbytes(torch.zeros(4, 8, 8, dtype=torch.float32))
    1024
    >>> nbytes(torch.zeros(4, 8, 8, dtype=torch.bfloat16))
    512
    >>> nbytes(torch.zeros(0, 8, device="meta"))
    0
    """
    if x.is_nested:
        return nbytes(x.values())
    if x.layout is torch.sparse_coo:
        return nbytes(x._values())
    return x.numel() * x.element_size()


def same_storage(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether ``x`` and ``y`` share one storage (one is a view of the other, or both are).

    Storages are compared themselves, not their data pointers, so this holds on ``meta``
    and empty tensors too (where every data pointer is 0): the rule the cost model uses
    for a view (0 bytes) is the same.

    >>> x = torch.arange(6.0).reshape(2, 3)
    >>> same_storage(x, x.T), same_storage(x, x.T.contiguous())
    (True, False)
    >>> meta = torch.empty(3, device="meta")
    >>> same_storage(meta, torch.empty(3, device="meta")), same_storage(meta, meta[1:])
    (False, True)
    """
    return bool(x.untyped_storage()._cdata == y.untyped_storage()._cdata)


def model_memory(model: torch.nn.Module, optimizer: str | None = "adam") -> dict[str, int]:
    """Bytes a model needs to train: parameters, gradients and optimizer state.

    Gradients are counted for parameters that require grad, at their dtype; optimizer state
    is ``OPTIMIZER_STATES[optimizer]`` tensors per trainable parameter, at its dtype.
    Activations depend on the batch and are not included.

    >>> sizes = model_memory(torch.nn.Linear(256, 64, bias=False), optimizer="adam")
    >>> sizes
    {'parameters': 65536, 'gradients': 65536, 'optimizer': 131072, 'total': 262144}
    """
    key = optimizer.lower() if optimizer is not None else None
    if key not in OPTIMIZER_STATES:
        known = ", ".join(sorted(k for k in OPTIMIZER_STATES if k))
        raise ValueError(f"model_memory(): unknown optimizer {optimizer!r}; known: {known}")
    parameters = sum(nbytes(p) for p in model.parameters())
    trainable = sum(nbytes(p) for p in model.parameters() if p.requires_grad)
    states = OPTIMIZER_STATES[key] * trainable
    return {
        "parameters": parameters,
        "gradients": trainable,
        "optimizer": states,
        "total": parameters + trainable + states,
    }


def training_memory(
    model: torch.nn.Module,
    optimizer: str | None = "adamw",
    dtype: torch.dtype | None = None,
    *,
    master_weights: bool | None = None,
    **dims: Any,
) -> TrainingMemory:
    """The bytes one training step of ``model`` holds at its peak, at ``dims`` (``batch=``,
    ``seq=``...): parameters, gradients, optimizer state, fp32 master weights (16-bit
    ``dtype``) and activations, as numbers and formulas in the model's dims. See
    :func:`typedflops.training.training_memory`.
    """
    from .training import training_memory as step_memory

    return step_memory(model, optimizer, dtype, master_weights=master_weights, **dims)
