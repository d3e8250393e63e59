"""Methods under each decorator kind, and an ``nn.Module`` with sizes of its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

import torch
from jaxtyping import Float
from torch import Tensor, nn


class Projection:
    """A weight ``w`` of shape ``(d_in, d_out)`` and methods of every kind."""

    def __init__(self, w: Tensor) -> None:
        self.w = w

    def mix(
        self, x: Float[Tensor, "batch d"], y: Float[Tensor, "batch d"]
    ) -> Float[Tensor, "batch d"]:
        """A plain method: unchecked, ``(2, 3)`` and ``(1, 3)`` broadcast silently."""
        return x + y

    @property
    def transposed(self) -> Float[Tensor, "d_out d_in"]:
        """A property; its return value is checked (a 3-D ``w`` breaks it)."""
        return self.w.transpose(0, 1)

    @staticmethod
    def outer(a: Float[Tensor, " m"], b: Float[Tensor, " n"]) -> Float[Tensor, "m n"]:
        """A staticmethod."""
        return a[:, None] * b[None, :]

    @classmethod
    def identity(cls, d: int, x: Float[Tensor, " d"]) -> Float[Tensor, " d"]:
        """A classmethod; returns ``x`` and the class it was called on."""
        cls.last_caller = cls
        return x.clone()

    last_caller: type[Projection] | None = None

    def combine(self, other: Projection) -> Float[Tensor, "d_in d_in"]:
        """A forward reference to this module's own class (resolved when first called)."""
        return self.w @ other.w.T


class Layer(nn.Module):
    """An ``nn.Module`` whose ``forward`` is annotated and whose sizes bind its dims."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.d_in, self.d_out = d_in, d_out
        self.weight = nn.Parameter(torch.ones(d_in, d_out))

    def typedflops_dims(self) -> Mapping[str, int]:
        return {"d_in": self.d_in, "d_out": self.d_out}

    def typedflops_tensors(self) -> Iterator[tuple[Tensor, str]]:
        yield self.weight, "d_in d_out"

    def forward(self, x: Float[Tensor, "batch d_in"]) -> Float[Tensor, "batch d_out"]:
        return x @ self.weight


@dataclasses.dataclass
class Batch:
    """A dataclass with tensor fields: the hook checks them at ``__init__``."""

    inputs: Float[Tensor, "n d"]
    labels: Float[Tensor, " n"]
    name: str = "batch"


@dataclasses.dataclass(frozen=True)
class Settings:
    """A dataclass without tensor fields: left alone."""

    width: int


@dataclasses.dataclass
class Pair:
    """A dataclass with its own annotated ``__init__``: that one is checked, once."""

    left: Float[Tensor, " n"]
    right: Float[Tensor, " n"]

    def __init__(self, both: Float[Tensor, "2 n"]) -> None:
        self.left, self.right = both[0], both[1]
