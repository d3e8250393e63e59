"""A typed decoder-only transformer LM: GPT-2 style and LLaMA style, and named configs.

- GPT-2 style (Radford et al. 2019; GPT-3, Brown et al. 2020): learned positions,
  LayerNorm, GELU MLP of ``d_ff = 4*d_model``, biases, the head tied to the embedding.
- LLaMA style (Touvron et al. 2023): rotary positions, RMSNorm, SwiGLU, no biases, an
  untied head.

Both are pre-norm: ``x + attention(norm(x))``, then ``x + mlp(norm(x))``. The model's own
sizes (``vocab``, ``context``, ``d_model``, ``n_heads``, ``d_head``, ``d_ff``, ``n_layers``)
are dims of its contract, so its cost is a formula in them (``n_layers`` counts the blocks).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import sympy
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..cost.types import Cost
from ..decorator import TypedFunction, typed_flops
from ..einops.ops import einsum
from ..errors import ShapeError, SpecError
from .attention import Attention, Kernel
from .layers import MLP, Device, Dropout, Embedding, LayerNorm, RMSNorm, SwiGLU, TypedLayer
from .lecture import Linear

__all__ = ["CONFIGS", "Block", "TransformerConfig", "TransformerLM"]


_Norm = Literal["layernorm", "rmsnorm"]
_Mlp = Literal["gelu", "swiglu"]
_Positions = Literal["learned", "rope"]
#: The config's fields that name a kind, and the kinds each may name.
_CHOICES: dict[str, Any] = {"norm": _Norm, "mlp": _Mlp, "positions": _Positions, "kernel": Kernel}


@dataclass(frozen=True)
class TransformerConfig:
    """The sizes and the kind of a transformer LM.

    ``d_head`` defaults to ``d_model // n_heads`` and ``d_ff`` to ``4 * d_model``.
    ``checkpoint=True`` recomputes each block's forward during backward
    (``torch.utils.checkpoint``): only the blocks' inputs are kept.

    >>> config = TransformerConfig.gpt2(vocab=50257, context=1024, d_model=768,
    ...                                 n_layers=12, n_heads=12)
    >>> config.d_head, config.d_ff, config.norm, config.tied
    (64, 3072, 'layernorm', True)
    """

    vocab: int
    context: int
    d_model: int
    n_layers: int
    n_heads: int
    d_head: int = 0
    d_ff: int = 0
    norm: _Norm = "layernorm"
    mlp: _Mlp = "gelu"
    positions: _Positions = "learned"
    tied: bool = True
    bias: bool = True
    dropout: float = 0.0
    kernel: Kernel = "sdpa"
    checkpoint: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab", "context", "d_model", "n_layers", "n_heads"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise SpecError.at("TransformerConfig()", f"{name}={value!r} is not a size >= 1")
        for name in ("d_head", "d_ff"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise SpecError.at(
                    "TransformerConfig()", f"{name}={value!r} is not a size (0: the default)"
                )
        for name, kind in _CHOICES.items():
            value = getattr(self, name)
            if value not in get_args(kind):
                known = ", ".join(repr(choice) for choice in get_args(kind))
                raise SpecError.at("TransformerConfig()", f"{name}={value!r} is not one of {known}")
        if not (type(self.dropout) in (int, float) and 0 <= self.dropout < 1):
            raise SpecError.at(
                "TransformerConfig()", f"dropout={self.dropout!r} is not a probability in [0, 1)"
            )
        if not self.d_head:
            if self.d_model % self.n_heads:
                raise SpecError.at(
                    "TransformerConfig()",
                    f"d_model={self.d_model} is not a multiple of n_heads={self.n_heads}",
                    hint="give d_head",
                )
            object.__setattr__(self, "d_head", self.d_model // self.n_heads)
        if not self.d_ff:
            object.__setattr__(self, "d_ff", 4 * self.d_model)

    @classmethod
    def gpt2(
        cls, vocab: int, context: int, d_model: int, n_layers: int, n_heads: int, **options: object
    ) -> TransformerConfig:
        """GPT-2 style: learned positions, LayerNorm, GELU MLP, biases, tied head."""
        return cls(vocab, context, d_model, n_layers, n_heads, **options)  # type: ignore[arg-type]

    @classmethod
    def llama(
        cls,
        vocab: int,
        context: int,
        d_model: int,
        n_layers: int,
        n_heads: int,
        d_ff: int,
        **options: object,
    ) -> TransformerConfig:
        """LLaMA style: RoPE, RMSNorm, SwiGLU of width ``d_ff``, no biases, untied head."""
        style: dict[str, object] = {
            "norm": "rmsnorm",
            "mlp": "swiglu",
            "positions": "rope",
            "tied": False,
            "bias": False,
        }
        style.update(options)
        return cls(vocab, context, d_model, n_layers, n_heads, d_ff=d_ff, **style)  # type: ignore[arg-type]

    def resized(self, sizes: Mapping[str, int]) -> TransformerConfig:
        """The same config with some of its sizes (``sizes``' keys of :attr:`sizes`) changed."""
        changes: dict[str, Any] = {name: sizes[name] for name in self.sizes if name in sizes}
        return dataclasses.replace(self, **changes)

    @property
    def sizes(self) -> dict[str, int]:
        """The model's own dims, by name."""
        return {
            "vocab": self.vocab,
            "context": self.context,
            "d_model": self.d_model,
            "n_heads": self.n_heads,
            "d_head": self.d_head,
            "d_ff": self.d_ff,
            "n_layers": self.n_layers,
        }


_GPT2_VOCAB = 50257

#: Named configs: GPT-2 (Radford et al. 2019, Table 2 and the released checkpoints), GPT-3
#: 175B (Brown et al. 2020, Table 2.1) and LLaMA 7B (Touvron et al. 2023, Table 2).
CONFIGS: Mapping[str, TransformerConfig] = {
    "gpt2": TransformerConfig.gpt2(_GPT2_VOCAB, 1024, 768, 12, 12),
    "gpt2-medium": TransformerConfig.gpt2(_GPT2_VOCAB, 1024, 1024, 24, 16),
    "gpt2-large": TransformerConfig.gpt2(_GPT2_VOCAB, 1024, 1280, 36, 20),
    "gpt2-xl": TransformerConfig.gpt2(_GPT2_VOCAB, 1024, 1600, 48, 25),
    "gpt3-175b": TransformerConfig.gpt2(_GPT2_VOCAB, 2048, 12288, 96, 96),
    "llama-7b": TransformerConfig.llama(32000, 2048, 4096, 32, 32, 11008),
}


def _norm(config: TransformerConfig, dtype: torch.dtype | None) -> LayerNorm | RMSNorm:
    if config.norm == "rmsnorm":
        return RMSNorm(config.d_model, dtype=dtype)
    return LayerNorm(config.d_model, bias=config.bias, dtype=dtype)


class Block(TypedLayer):
    """One pre-norm transformer block: ``x + drop(attn(norm1(x)))``, then
    ``x + drop(mlp(norm2(x)))``, sized and styled by a :class:`TransformerConfig`.

    >>> block = Block(TransformerConfig.gpt2(vocab=10, context=8, d_model=16, n_layers=1,
    ...                                      n_heads=2))
    >>> block(torch.randn(2, 8, 16)).shape
    torch.Size([2, 8, 16])
    """

    def __init__(self, config: TransformerConfig, *, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.config = config
        self.d_model, self.n_heads, self.d_head = config.d_model, config.n_heads, config.d_head
        self.d_ff = config.d_ff
        self.norm1 = _norm(config, dtype)
        self.attn = Attention(
            config.d_model,
            config.n_heads,
            config.d_head,
            bias=config.bias,
            rope=config.positions == "rope",
            kernel=config.kernel,
            dropout=config.dropout,
            dtype=dtype,
        )
        self.norm2 = _norm(config, dtype)
        self.mlp: MLP | SwiGLU = (
            SwiGLU(config.d_model, config.d_ff, dtype=dtype)
            if config.mlp == "swiglu"
            else MLP(config.d_model, config.d_ff, bias=config.bias, dtype=dtype)
        )
        self.drop = Dropout(config.dropout)

    def typedflops_dims(self) -> Mapping[str, int]:
        return {
            "d_model": self.d_model,
            "n_heads": self.n_heads,
            "d_head": self.d_head,
            "d_ff": self.d_ff,
        }

    def typedflops_resized(
        self, dims: Mapping[str, int], dtype: torch.dtype | None = None
    ) -> Block:
        own = self.typedflops_dims()
        return Block(
            self.config.resized({name: dims[name] for name in own if name in dims}),
            dtype=dtype or self.float_dtype(),
        )

    @typed_flops
    def forward(
        self, x: Float[Tensor, "*batch seq d_model"]
    ) -> Float[Tensor, "*batch seq d_model"]:
        """Apply the block to ``x`` (``(*batch, seq, d_model)``); with the config's
        ``checkpoint``, only ``x`` is kept for backward, which runs the block again."""
        if self.config.checkpoint and torch.is_grad_enabled():
            modes = [] if torch.compiler.is_compiling() else _function_modes()
            if modes:
                out: Tensor = checkpoint(
                    self._layers, x, use_reentrant=False, context_fn=lambda: _again(modes)
                )
            else:
                out = checkpoint(self._layers, x, use_reentrant=False)
            return out
        return self._layers(x)

    def recomputed_activations(
        self, batch: int, seq: int, dtype: torch.dtype | None = None
    ) -> tuple[int, sympy.Expr]:
        """With the config's ``checkpoint``: the bytes backward holds while it runs this
        block again, its activations beyond its input (which the checkpoint keeps), as a
        number and a formula; ``(0, 0)`` without checkpoint."""
        if not self.config.checkpoint:
            return 0, sympy.Integer(0)
        step_dtype = dtype or self.float_dtype()
        with torch.device("meta"):
            plain = Block(dataclasses.replace(self.config, checkpoint=False), dtype=step_dtype)
        cost = plain.estimate(batch=batch, seq=seq, dtype=step_dtype)
        size = torch.empty((), dtype=step_dtype).element_size()
        names = sympy.symbols("batch seq d_model")
        held = sympy.expand(cost.activation_formula - size * sympy.Mul(*names))
        return cost.activation_bytes - size * batch * seq * self.d_model, held

    def _layers(self, x: Tensor) -> Tensor:
        x = x + self.drop(self.attn(self.norm1(x)))
        out: Tensor = x + self.drop(self.mlp(self.norm2(x)))
        return out


def _function_modes() -> list[Any]:
    return list(torch.overrides._get_current_function_mode_stack())  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def _entered(modes: Sequence[Any]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for mode in modes:
            stack.enter_context(mode)
        yield


def _again(modes: Sequence[Any]) -> tuple[Any, Any]:
    """The contexts of a block's checkpoint: backward runs the block again under the torch
    function modes its forward ran under (autograd runs backward without them), so that it
    makes the tensors the forward made (``torch.device``, a dry run's attention kernel)."""
    return contextlib.nullcontext(), _entered(modes)


class TransformerLM(TypedLayer):
    """A decoder-only LM: token ids ``(batch, seq)`` to logits ``(batch, seq, vocab)``.

    Build it on ``device="meta"`` to cost configs far larger than memory:

    >>> config = TransformerConfig.gpt2(vocab=100, context=16, d_model=32, n_layers=2,
    ...                                 n_heads=4)
    >>> model = TransformerLM(config)
    >>> model(torch.zeros(2, 16, dtype=torch.long)).shape
    torch.Size([2, 16, 100])
    >>> cost = model.estimate(batch=2, seq=16)
    >>> sorted(str(s) for s in cost.matmul_formula.free_symbols)
    ['batch', 'd_ff', 'd_head', 'd_model', 'n_heads', 'n_layers', 'seq', 'vocab']
    """

    def __init__(
        self, config: TransformerConfig, *, device: Device = None, dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self.config = config
        self.vocab, self.context, self.d_model = config.vocab, config.context, config.d_model
        self.n_heads, self.d_head, self.d_ff = config.n_heads, config.d_head, config.d_ff
        self.n_layers = config.n_layers
        with torch.device(device) if device is not None else _no_device():
            self.embed = Embedding(config.vocab, config.d_model, dtype=dtype)
            self.positions = (
                Embedding(config.context, config.d_model, dtype=dtype)
                if config.positions == "learned"
                else None
            )
            self.drop = Dropout(config.dropout)
            self.blocks = torch.nn.ModuleList(
                Block(config, dtype=dtype) for _ in range(config.n_layers)
            )
            self.norm = _norm(config, dtype)
            self.head = None if config.tied else Linear(config.d_model, config.vocab, dtype=dtype)

    def typedflops_dims(self) -> Mapping[str, int]:
        return self.config.sizes

    def typedflops_resized(
        self, dims: Mapping[str, int], dtype: torch.dtype | None = None
    ) -> TransformerLM:
        return TransformerLM(self.config.resized(dims), dtype=dtype or self.float_dtype())

    @typed_flops
    def forward(self, ids: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq vocab"]:
        """The logits ``(batch, seq, vocab)`` of the next token after each of ``ids``
        (``(batch, seq)``, ``seq`` at most the model's ``context``)."""
        return self._logits(ids)

    @typed_flops
    def loss(
        self, ids: Int[Tensor, "batch seq"], targets: Int[Tensor, "batch seq"]
    ) -> Float[Tensor, ""]:
        """The mean cross-entropy of predicting ``targets`` (``(batch, seq)``) from ``ids``."""
        # Not through forward(): the blocks stay one call deep, where dry runs name their
        # count n_layers.
        logits = self._logits(ids)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def _logits(self, ids: Tensor) -> Tensor:
        x = self.embed_ids(ids)
        for block in self.blocks:
            x = block(x)
        return self.logits_of(x)

    def embed_ids(self, ids: Tensor) -> Tensor:
        """What the first block takes: ``ids`` (``(batch, seq)``) embedded, with their
        positions (learned ones), after dropout: ``(batch, seq, d_model)``. A pipeline's
        first stage runs this before its blocks."""
        seq = ids.shape[-1]
        if seq > self.context:
            raise ShapeError(
                f"TransformerLM: argument 'ids' has seq={seq} positions but the "
                f"model's context is {self.context}",
                function="TransformerLM",
                argument="ids",
                dim="seq",
                expected=self.context,
                actual=seq,
            )
        x = self.embed(ids)
        if self.positions is not None:
            x = x + self.positions(torch.arange(seq, device=ids.device))
        out: Tensor = self.drop(x)
        return out

    def logits_of(self, x: Tensor) -> Tensor:
        """The logits ``(batch, seq, vocab)`` of the last block's output ``x``
        (``(batch, seq, d_model)``): the final norm, then the head (the embedding, when
        tied). A pipeline's last stage runs this after its blocks."""
        x = self.norm(x)
        if self.head is not None:
            logits: Tensor = self.head(x)
            return logits
        return einsum(x, self.embed.weight, "batch seq d_model, vocab d_model -> batch seq vocab")

    def loss_estimate(self, batch: int, seq: int, dtype: torch.dtype | None = None) -> Cost:
        """The cost of :meth:`loss` (forward and cross-entropy; backward for the parameters)
        at ``batch`` and ``seq``, from a meta dry run."""
        loss = type(self).loss
        assert isinstance(loss, TypedFunction)
        return loss.estimate(self, batch=batch, seq=seq, dtype=dtype or self.float_dtype())


def _no_device() -> torch.device:
    return torch.device(torch.get_default_device())
