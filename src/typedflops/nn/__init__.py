"""Typed models whose own sizes are part of the contract, and whose costs are formulas in them.

- the lecture's models: :class:`Linear`, :class:`TwoLayerMLP` (and their base
  :class:`TypedModule`);
- transformer parts: :class:`Embedding`, :class:`LayerNorm`, :class:`RMSNorm`,
  :class:`Dropout`, :class:`MLP`, :class:`SwiGLU`, :class:`Attention`, :class:`Block`;
- :class:`TransformerLM` with two families of configs, GPT-2 style and LLaMA style
  (:class:`TransformerConfig`, :data:`CONFIGS`).

Each module declares its sizes (``typedflops_dims()``: ``d_model``, ``n_heads``, ``d_head``,
``d_ff``, ``vocab``, ``n_layers``, ``context``) and can be rebuilt at others
(``typedflops_resized()``), so dry runs fit formulas in those names.
"""

from __future__ import annotations

from .attention import Attention as Attention
from .attention import rotary_tables as rotary_tables
from .layers import MLP as MLP
from .layers import Dropout as Dropout
from .layers import Embedding as Embedding
from .layers import LayerNorm as LayerNorm
from .layers import RMSNorm as RMSNorm
from .layers import SwiGLU as SwiGLU
from .layers import TypedLayer as TypedLayer
from .lecture import Linear as Linear
from .lecture import TwoLayerMLP as TwoLayerMLP
from .lecture import TypedModule as TypedModule
from .transformer import CONFIGS as CONFIGS
from .transformer import Block as Block
from .transformer import TransformerConfig as TransformerConfig
from .transformer import TransformerLM as TransformerLM

__all__ = [
    "CONFIGS",
    "MLP",
    "Attention",
    "Block",
    "Dropout",
    "Embedding",
    "LayerNorm",
    "Linear",
    "RMSNorm",
    "SwiGLU",
    "TransformerConfig",
    "TransformerLM",
    "TwoLayerMLP",
    "TypedLayer",
    "TypedModule",
    "rotary_tables",
]
