"""Typed transformer layers: embeddings, norms, dropout and the two feed-forward kinds.

Every forward is ``@typed_flops``: the module's own sizes (``vocab``, ``d_model``, ``d_ff``)
are bound from the module before the input is checked, and a dry run rebuilds the module at
other sizes (``typedflops_resized``) to fit its cost as a formula in those names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from ..cost.types import Cost
from ..decorator import TypedFunction, typed_flops
from ..errors import SpecError
from .lecture import Linear, TypedModule

__all__ = ["MLP", "Dropout", "Embedding", "LayerNorm", "RMSNorm", "SwiGLU", "TypedLayer"]

Device = torch.device | str | None


def constant_parameter(
    size: int, value: float, device: Device, dtype: torch.dtype | None
) -> torch.nn.Parameter:
    """A ``(size,)`` parameter filled with ``value`` (left unfilled on ``meta``, where
    filling costs time and means nothing)."""
    tensor = torch.empty(size, device=device, dtype=dtype)
    if tensor.device.type != "meta":
        tensor.fill_(value)
    return torch.nn.Parameter(tensor)


class TypedLayer(TypedModule):
    """Base of the transformer parts: ``estimate`` takes any of the forward's dims."""

    def float_dtype(self) -> torch.dtype:
        """The dtype of the module's floating-point parameters (float32 without any)."""
        for parameter in self.parameters():
            if parameter.is_floating_point():
                return parameter.dtype
        return torch.float32

    def estimate(
        self,
        batch: int | tuple[int, ...],
        dtype: torch.dtype | None = None,
        *,
        grad: tuple[str, ...] = (),
        **dims: int,
    ) -> Cost:
        """The cost of one forward call from a meta dry run: ``batch`` (an int, or a tuple
        for several batch axes) and the forward's other dims (``seq=``...).

        Parameters follow their ``requires_grad``; the input needs grad only when ``grad``
        names it (``grad=("x",)``); ``dtype`` (default: the parameters') is the dtype of the
        floating-point tensors. Nothing is allocated.
        """
        forward = type(self).forward
        assert isinstance(forward, TypedFunction)
        sizes: dict[str, Any] = {"batch": batch, **dims}
        return forward.estimate(self, dtype=dtype or self.float_dtype(), grad=grad, **sizes)


class Embedding(TypedLayer):
    """A lookup table of ``vocab`` rows of width ``d_model``: ids ``(*batch)`` to vectors
    ``(*batch, d_model)``. A lookup costs 0 FLOPs; its backward adds one FLOP per value.

    >>> table = Embedding(10, 4)
    >>> table(torch.tensor([[1, 2, 3]])).shape
    torch.Size([1, 3, 4])
    """

    def __init__(
        self, vocab: int, d_model: int, *, device: Device = None, dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self.vocab, self.d_model = vocab, d_model
        weight = torch.empty(vocab, d_model, device=device, dtype=dtype)
        if weight.device.type != "meta":
            torch.nn.init.normal_(weight, std=0.02)  # GPT-2's initialisation
        self.weight = torch.nn.Parameter(weight)

    def typedflops_dims(self) -> Mapping[str, int]:
        return {"vocab": self.vocab, "d_model": self.d_model}

    def typedflops_resized(
        self, dims: Mapping[str, int], dtype: torch.dtype | None = None
    ) -> Embedding:
        return Embedding(
            dims.get("vocab", self.vocab),
            dims.get("d_model", self.d_model),
            dtype=dtype or self.weight.dtype,
        )

    @typed_flops
    def forward(self, ids: Int[Tensor, "*batch"]) -> Float[Tensor, "*batch d_model"]:
        """Look up ``ids`` (``(*batch)``, each in ``[0, vocab)``): ``(*batch, d_model)``."""
        return F.embedding(ids, self.weight)

    def extra_repr(self) -> str:
        return f"vocab={self.vocab}, d_model={self.d_model}"


class LayerNorm(TypedLayer):
    """Layer normalisation over ``d_model`` with a weight and (optionally) a bias.

    Costs 7 FLOPs per element forward (5 for the normalisation, 2 for weight and bias).

    >>> norm = LayerNorm(8)
    >>> norm.estimate(batch=4).formula
    7*batch*d_model
    """

    def __init__(
        self,
        d_model: int,
        *,
        eps: float = 1e-5,
        bias: bool = True,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = constant_parameter(d_model, 1.0, device, dtype)
        self.bias = constant_parameter(d_model, 0.0, device, dtype) if bias else None

    def typedflops_dims(self) -> Mapping[str, int]:
        return {"d_model": self.d_model}

    def typedflops_resized(
        self, dims: Mapping[str, int], dtype: torch.dtype | None = None
    ) -> LayerNorm:
        return LayerNorm(
            dims.get("d_model", self.d_model),
            eps=self.eps,
            bias=self.bias is not None,
            dtype=dtype or self.weight.dtype,
        )

    @typed_flops
    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        """Normalise ``x`` (``(*batch, d_model)``) over its last axis."""
        return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)


class RMSNorm(TypedLayer):
    """Root-mean-square normalisation over ``d_model`` with a weight (LLaMA's norm).

    >>> RMSNorm(8)(torch.ones(2, 8)).shape
    torch.Size([2, 8])
    """

    def __init__(
        self,
        d_model: int,
        *,
        eps: float = 1e-6,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = constant_parameter(d_model, 1.0, device, dtype)

    def typedflops_dims(self) -> Mapping[str, int]:
        return {"d_model": self.d_model}

    def typedflops_resized(
        self, dims: Mapping[str, int], dtype: torch.dtype | None = None
    ) -> RMSNorm:
        return RMSNorm(
            dims.get("d_model", self.d_model), eps=self.eps, dtype=dtype or self.weight.dtype
        )

    @typed_flops
    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        """Normalise ``x`` (``(*batch, d_model)``) by its root mean square, then scale."""
        return F.rms_norm(x, (self.d_model,), self.weight, self.eps)


class Dropout(TypedLayer):
    """Dropout with probability ``p`` in training mode, the identity otherwise.

    Runs ``torch.native_dropout``, the kernel GPUs run for ``F.dropout``: its mask is kept
    for backward as one byte per element (``F.dropout`` on a CPU keeps a mask in the
    input's dtype). 0 FLOPs are counted for drawing the mask, one per element for applying it.

    >>> drop = Dropout(0.1).eval()
    >>> bool((drop(torch.ones(3)) == 1).all())
    True
    """

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise SpecError.at("Dropout()", f"p={p!r} is not a probability in [0, 1)")
        self.p = p

    def typedflops_dims(self) -> Mapping[str, int]:
        return {}

    def typedflops_resized(
        self, dims: Mapping[str, int], dtype: torch.dtype | None = None
    ) -> Dropout:
        return Dropout(self.p)

    @typed_flops
    def forward(self, x: Float[Tensor, "*shape"]) -> Float[Tensor, "*shape"]:
        """Zero each element of ``x`` (any shape) with probability ``p``, scale the rest."""
        if not self.training or self.p == 0.0:
            return x
        out, _ = torch.native_dropout(x, self.p, True)
        return out

    def extra_repr(self) -> str:
        return f"p={self.p}"


class MLP(TypedLayer):
    """GPT-2's feed-forward block: ``proj(gelu(fc(x)))``, ``d_model -> d_ff -> d_model``.

    ``d_ff`` is ``4 * d_model`` in GPT-2 and GPT-3. The GELU is the tanh approximation.

    >>> mlp = MLP(8, 32, bias=False)
    >>> mlp.estimate(batch=4).formula  # two matmuls and one GELU per hidden value
    batch*d_ff*(4*d_model + 1)
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        bias: bool = True,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_model, self.d_ff = d_model, d_ff
        self.fc = Linear(d_model, d_ff, bias=bias, device=device, dtype=dtype)
        self.proj = Linear(d_ff, d_model, bias=bias, device=device, dtype=dtype)

    def typedflops_dims(self) -> Mapping[str, int]:
        return {"d_model": self.d_model, "d_ff": self.d_ff}

    def typedflops_resized(self, dims: Mapping[str, int], dtype: torch.dtype | None = None) -> MLP:
        return MLP(
            dims.get("d_model", self.d_model),
            dims.get("d_ff", self.d_ff),
            bias=self.fc.bias is not None,
            dtype=dtype or self.fc.weight.dtype,
        )

    @typed_flops
    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        """Apply the block to ``x`` (``(*batch, d_model)``)."""
        hidden = F.gelu(self.fc(x), approximate="tanh")
        out: Tensor = self.proj(hidden)
        return out


class SwiGLU(TypedLayer):
    """LLaMA's feed-forward block: ``w2(silu(w1(x)) * w3(x))``, no biases.

    >>> ffn = SwiGLU(8, 16)
    >>> ffn.estimate(batch=4).formula  # three matmuls, SiLU and the product
    2*batch*d_ff*(3*d_model + 1)
    """

    def __init__(
        self, d_model: int, d_ff: int, *, device: Device = None, dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self.d_model, self.d_ff = d_model, d_ff
        self.w1 = Linear(d_model, d_ff, device=device, dtype=dtype)
        self.w3 = Linear(d_model, d_ff, device=device, dtype=dtype)
        self.w2 = Linear(d_ff, d_model, device=device, dtype=dtype)

    def typedflops_dims(self) -> Mapping[str, int]:
        return {"d_model": self.d_model, "d_ff": self.d_ff}

    def typedflops_resized(
        self, dims: Mapping[str, int], dtype: torch.dtype | None = None
    ) -> SwiGLU:
        return SwiGLU(
            dims.get("d_model", self.d_model),
            dims.get("d_ff", self.d_ff),
            dtype=dtype or self.w1.weight.dtype,
        )

    @typed_flops
    def forward(self, x: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch d_model"]:
        """Apply the block to ``x`` (``(*batch, d_model)``)."""
        gated = F.silu(self.w1(x)) * self.w3(x)
        out: Tensor = self.w2(gated)
        return out
