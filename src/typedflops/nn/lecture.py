"""Typed models: the lecture's linear layer and two-layer MLP, with their sizes in the contract.

A module's own sizes (``d_in``, ``d_hidden``, ``d_out``) are bound before its input is
checked, so an input of the wrong width is a :class:`~typedflops.ShapeError` that names the
module, raised before any kernel runs (instead of torch's matmul error). Weights are
stored ``d_in x d_out`` and applied as ``x @ w``, as in CS336 lecture 2.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from jaxtyping import Float
from torch import Tensor

from ..cost.types import Cost
from ..decorator import TypedFunction, typed_flops
from ..einops.ops import einsum

__all__ = ["Linear", "TwoLayerMLP", "TypedModule"]


class TypedModule(torch.nn.Module):
    """Base of the typed models: parameter count and dry-run cost estimates."""

    def typedflops_dims(self) -> Mapping[str, int]:
        """The module's own sizes, bound before its input is checked."""
        raise NotImplementedError

    def typedflops_resized(
        self, dims: Mapping[str, int], dtype: torch.dtype | None = None
    ) -> TypedModule:
        """A module of the same kind at other sizes of its own dims, in ``dtype`` (for dry
        runs, which build it under a fake mode: nothing is allocated)."""
        raise NotImplementedError

    @property
    def param_count(self) -> int:
        """The number of parameters (scalars), all of them."""
        return sum(p.numel() for p in self.parameters())

    def estimate(self, batch: int | tuple[int, ...], dtype: torch.dtype | None = None) -> Cost:
        """The cost of one forward call on a ``(*batch, d_in)`` input, from a meta dry run.

        Parameters follow their ``requires_grad``; the input needs no grad. Nothing is
        allocated, also for models far larger than memory (build them on ``device="meta"``).
        """
        forward = type(self).forward
        assert isinstance(forward, TypedFunction)
        x_dtype = dtype or next(self.parameters()).dtype
        return forward.estimate(self, batch=batch, dtype=x_dtype)


def _init_weight(
    d_in: int, d_out: int, device: torch.device | str | None, dtype: torch.dtype | None
) -> torch.nn.Parameter:
    # Scaled by 1/sqrt(d_in) so activations keep unit scale (CS336 lecture 2).
    weight = torch.empty(d_in, d_out, device=device, dtype=dtype)
    if weight.device.type != "meta":
        torch.nn.init.normal_(weight, std=1 / math.sqrt(d_in))
    return torch.nn.Parameter(weight)


class Linear(TypedModule):
    """``y = x @ weight (+ bias)`` with ``weight`` of shape ``(d_in, d_out)``.

    Forward FLOPs are ``2*batch*d_in*d_out`` (plus ``batch*d_out`` for the bias).

    >>> layer = Linear(4, 3)
    >>> layer(torch.ones(8, 4)).shape
    torch.Size([8, 3])
    >>> layer.estimate(batch=8).formula
    2*batch*d_in*d_out
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        *,
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_in, self.d_out = d_in, d_out
        self.weight = _init_weight(d_in, d_out, device, dtype)
        self.bias = (
            torch.nn.Parameter(torch.zeros(d_out, device=device, dtype=dtype)) if bias else None
        )

    def typedflops_dims(self) -> Mapping[str, int]:
        return {"d_in": self.d_in, "d_out": self.d_out}

    def typedflops_resized(
        self, dims: Mapping[str, int], dtype: torch.dtype | None = None
    ) -> Linear:
        return Linear(
            dims.get("d_in", self.d_in),
            dims.get("d_out", self.d_out),
            bias=self.bias is not None,
            dtype=dtype or self.weight.dtype,
        )

    @typed_flops
    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        """Apply the layer: ``x`` is ``(*batch, d_in)``, the result ``(*batch, d_out)``."""
        y = einsum(x, self.weight, "... d_in, d_in d_out -> ... d_out")
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, d_out={self.d_out}, bias={self.bias is not None}"


class TwoLayerMLP(TypedModule):
    """The lecture's two-layer model: ``h1 = x @ w1; h2 = activation(h1) @ w2``.

    With no activation (the lecture's model is ``TwoLayerMLP(D, D, K)``), forward FLOPs are
    ``2*batch*d_hidden*(d_in + d_out)`` and, with the input needing no grad, backward FLOPs
    ``2*batch*d_hidden*(d_in + 2*d_out)``.

    >>> model = TwoLayerMLP(4, 4, 2)
    >>> model(torch.ones(8, 4)).shape
    torch.Size([8, 2])
    >>> cost = model.estimate(batch=8)
    >>> cost.formula, cost.backward_formula
    (2*batch*d_hidden*(d_in + d_out), 2*batch*d_hidden*(d_in + 2*d_out))
    """

    def __init__(
        self,
        d_in: int,
        d_hidden: int,
        d_out: int,
        *,
        activation: Callable[[Tensor], Tensor] | None = None,
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_in, self.d_hidden, self.d_out = d_in, d_hidden, d_out
        self.fc1 = Linear(d_in, d_hidden, bias=bias, device=device, dtype=dtype)
        self.fc2 = Linear(d_hidden, d_out, bias=bias, device=device, dtype=dtype)
        self.activation = activation

    def typedflops_dims(self) -> Mapping[str, int]:
        return {"d_in": self.d_in, "d_hidden": self.d_hidden, "d_out": self.d_out}

    def typedflops_resized(
        self, dims: Mapping[str, int], dtype: torch.dtype | None = None
    ) -> TwoLayerMLP:
        return TwoLayerMLP(
            dims.get("d_in", self.d_in),
            dims.get("d_hidden", self.d_hidden),
            dims.get("d_out", self.d_out),
            activation=self.activation,
            bias=self.fc1.bias is not None,
            dtype=dtype or self.fc1.weight.dtype,
        )

    @typed_flops
    def forward(self, x: Float[Tensor, "*batch d_in"]) -> Float[Tensor, "*batch d_out"]:
        """Apply the model: ``x`` is ``(*batch, d_in)``, the result ``(*batch, d_out)``."""
        h1: Tensor = self.fc1(x)
        if self.activation is not None:
            h1 = self.activation(h1)
        h2: Tensor = self.fc2(h1)
        return h2
