"""Decorated functions and methods at module level, for the pickling tests: a spawned worker
process imports this module to find them by name."""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import typed_flops
from typedflops.nn import TypedModule


@typed_flops
def double(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    """``2 * x`` for a vector ``x`` of shape ``(n,)``."""
    return 2 * x


def row_sums(x: Float[Tensor, "rows cols"]) -> list[float]:
    """A plain function for the worker pool: the sums of ``x``'s rows through :func:`double`."""
    return [float(value) for value in Scaler(3).apply(double(x.sum(-1)))]


class Scaler(torch.nn.Module):
    """Multiplies by ``factor``; its decorated methods pickle as bound methods."""

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor

    @typed_flops
    def forward(self, x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        """``factor * x`` for ``x`` of shape ``(n,)``."""
        return self.factor * x

    @typed_flops
    def apply(self, x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        """The same as calling the module."""
        return self(x)

    @staticmethod
    @typed_flops
    def negate(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        """``-x`` for ``x`` of shape ``(n,)``."""
        return -x

    @classmethod
    @typed_flops
    def unit(cls, x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        """``x`` for ``x`` of shape ``(n,)``."""
        return x


__all__ = ["Scaler", "TypedModule", "double", "row_sums"]
