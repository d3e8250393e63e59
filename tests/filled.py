"""Tensors filled with ones, of a given shape, dtype and device, for the contract tests."""

from __future__ import annotations

import torch
from torch import Tensor


def ones(*shape: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Tensor:
    """A tensor of ones of shape ``shape``."""
    return torch.ones(shape, dtype=dtype, device=device)
