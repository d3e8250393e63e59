"""Memory accounting: tensor sizes, shared storage, and a model's training-state bytes."""

from __future__ import annotations

import torch

from .cost.storage import nbytes, same_storage
from .planning.training import OPTIMIZER_STATES, TrainingMemory, optimizer_key, training_memory

__all__ = [
    "OPTIMIZER_STATES",
    "TrainingMemory",
    "model_memory",
    "nbytes",
    "same_storage",
    "training_memory",
]


def model_memory(model: torch.nn.Module, optimizer: str | None = "adam") -> dict[str, int]:
    """Bytes a model needs to train: parameters, gradients and optimizer state.

    Gradients are counted for parameters that require grad, at their dtype; optimizer state
    is ``OPTIMIZER_STATES[optimizer]`` tensors per trainable parameter, at its dtype.
    Activations depend on the batch and are not included.

    >>> sizes = model_memory(torch.nn.Linear(256, 64, bias=False), optimizer="adam")
    >>> sizes
    {'parameters': 65536, 'gradients': 65536, 'optimizer': 131072, 'total': 262144}
    """
    key = optimizer_key(optimizer, "model_memory()")
    parameters = sum(nbytes(p) for p in model.parameters())
    trainable = sum(nbytes(p) for p in model.parameters() if p.requires_grad)
    states = OPTIMIZER_STATES[key] * trainable
    return {
        "parameters": parameters,
        "gradients": trainable,
        "optimizer": states,
        "total": parameters + trainable + states,
    }
