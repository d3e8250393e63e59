"""Methods under each decorator kind, and an ``nn.Module``."""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor, nn


class Projection:
    """A weight ``w`` of shape ``(d_in, d_out)`` and methods of every kind that use it."""

    def __init__(self, w: Tensor) -> None:
        self.w = w

    def apply(self, x: Float[Tensor, "batch d_in"]) -> Float[Tensor, "batch d_out"]:
        """A plain method."""
        return x @ self.w

    @property
    def transposed(self) -> Float[Tensor, "d_out d_in"]:
        """A property; its return value is checked (``d_out d_in`` must be 2-D)."""
        return self.w.T

    @staticmethod
    def outer(a: Float[Tensor, " m"], b: Float[Tensor, " n"]) -> Float[Tensor, "m n"]:
        """A staticmethod."""
        return a[:, None] * b[None, :]

    @classmethod
    def identity(cls, d: int, x: Float[Tensor, " d"]) -> Float[Tensor, " d"]:
        """A classmethod (``d`` is a plain int; ``x`` must have ``d`` elements by hand)."""
        assert cls is Projection or issubclass(cls, Projection)
        return x.clone()

    def combine(self, other: Projection) -> Float[Tensor, "d_in d_in"]:
        """A forward reference to this module's own class (resolved when first called)."""
        return self.w @ other.w.T


class Layer(nn.Module):
    """An ``nn.Module`` whose ``forward`` is annotated."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_in, d_out))

    def forward(self, x: Float[Tensor, "batch d_in"]) -> Float[Tensor, "batch d_out"]:
        return x @ self.weight
