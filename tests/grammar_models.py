"""Small models built from the forms people write, for the property test of
``tests/cost/test_grammar_models.py``: layers sized by constructor arguments, heads split by
``d // n_head``, loops over ``self.n_layers`` and over a size of the input, a branch on a
size, pooling and strided convolutions (``(s + 2*p - k)//stride + 1``), upsampling,
padding to a multiple, two branches concatenated (widths add), einops rearranges.

Each form is a step the model applies in order, named in ``steps``; every step maps
``(batch, seq, d)`` to ``(batch, seq', d)`` (:class:`Sequence1d`) or ``(batch, c, h, w)``
to ``(batch, c, h', w')`` (:class:`Image2d`), so any list of steps is a model.
"""

from __future__ import annotations

import dataclasses

import einops
import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.nn import functional as F

from typedflops import typed_flops

#: The steps of :class:`Sequence1d`.
SEQUENCE_STEPS = (
    "mlp",
    "stack",
    "repeat",
    "heads",
    "rows",
    "branch",
    "pool",
    "maxpool",
    "conv",
    "strided",
    "upsample",
    "pad",
    "concat",
    "rearrange",
    "halves",
    "wide",
    "grouped",
    "keys",
)

#: The steps of :class:`Image2d`.
IMAGE_STEPS = ("conv", "strided", "pool", "upsample", "mlp", "concat", "pad", "rows", "branch")


class Sequence1d(nn.Module):
    """``x``: (batch, seq, d) -> (batch, seq', d), through ``steps`` in order."""

    def __init__(
        self, d: int, hidden: int, n_layers: int, n_head: int, kernel: int, steps: tuple[str, ...]
    ) -> None:
        super().__init__()
        self.d = d
        self.hidden = hidden
        self.n_layers = n_layers
        self.n_head = n_head
        self.kernel = kernel
        self.steps = steps
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(n_layers))
        self.shared = nn.Linear(d, d)
        self.conv = nn.Conv1d(d, d, kernel, padding=kernel // 2)
        self.reduce = nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.side = nn.Linear(d, hidden)
        self.merge = nn.Linear(hidden + d, d)
        self.grouped = nn.Conv1d(d, d, 3, padding=1, groups=n_head)
        self.keys = nn.Linear(d, 2 * (d // n_head))

    @typed_flops
    def forward(self, x: Float[Tensor, "batch seq d"]) -> Float[Tensor, "batch out d"]:
        for step in self.steps:
            x = self.apply_step(step, x)
        return x

    def apply_step(self, step: str, x: Tensor) -> Tensor:
        """One step: (batch, seq, d) -> (batch, seq', d)."""
        if step == "mlp":
            out: Tensor = self.down(F.gelu(self.up(x)))
            return out
        if step == "stack":
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x
        if step == "repeat":
            for _ in range(self.n_layers):
                x = self.shared(x)
            return x
        if step == "heads":
            batch, seq, _ = x.shape
            q = x.reshape(batch, seq, self.n_head, self.d // self.n_head).transpose(1, 2)
            scores = torch.softmax(q @ q.transpose(-1, -2), dim=-1)
            return (scores @ q).transpose(1, 2).reshape(batch, seq, self.d)
        if step == "rows":
            for i in range(x.shape[1]):
                x = x + x[:, i : i + 1]
            return x
        if step == "branch":
            if x.shape[1] > 6:
                x = x * 2
            return x
        if step == "pool":
            return F.avg_pool1d(x.transpose(1, 2), 3, 2, 1).transpose(1, 2)
        if step == "maxpool":
            return F.max_pool1d(x.transpose(1, 2), 2, ceil_mode=True).transpose(1, 2)
        if step == "conv":
            out = self.conv(x.transpose(1, 2)).transpose(1, 2)
            return out
        if step == "strided":
            out = self.reduce(x.transpose(1, 2)).transpose(1, 2)
            return out
        if step == "upsample":
            return F.interpolate(x.transpose(1, 2), scale_factor=2).transpose(1, 2)
        if step == "pad":
            return F.pad(x, (0, 0, 0, (-x.shape[1]) % 4))
        if step == "concat":
            out = self.merge(torch.cat([self.side(x), x], -1))
            return out
        if step == "rearrange":
            heads = einops.rearrange(x, "b s (h e) -> b h s e", h=self.n_head)
            mixed = heads.softmax(-1) * heads
            return einops.rearrange(mixed, "b h s e -> b s (h e)")
        if step == "halves":
            for _ in range(x.shape[1] // 2):
                x = x * 0.5
            return x
        if step == "wide":
            if self.hidden > 8:
                x = torch.tanh(x)
            return x
        if step == "grouped":
            out = self.grouped(x.transpose(1, 2)).transpose(1, 2)
            return out
        if step == "keys":
            key, value = self.keys(x).chunk(2, -1)
            scores = torch.softmax(x[..., : key.shape[-1]] @ key.transpose(-1, -2), dim=-1)
            out = x + (scores @ value).sum(-1, keepdim=True)
            return out
        raise ValueError(f"no step {step!r}")


@dataclasses.dataclass
class SequenceConfig:
    """The sizes of a :class:`ConfiguredSequence1d`, and its steps."""

    d: int
    hidden: int
    n_layers: int
    n_head: int
    kernel: int
    steps: tuple[str, ...]


class ConfiguredSequence1d(Sequence1d):
    """A :class:`Sequence1d` built from a config object, as nanoGPT's ``GPT(config)``."""

    def __init__(self, config: SequenceConfig) -> None:
        super().__init__(
            config.d, config.hidden, config.n_layers, config.n_head, config.kernel, config.steps
        )
        self.config = config


class Image2d(nn.Module):
    """``x``: (batch, c, h, w) -> (batch, c, h', w'), through ``steps`` in order."""

    def __init__(self, c: int, hidden: int, kernel: int, steps: tuple[str, ...]) -> None:
        super().__init__()
        self.c = c
        self.hidden = hidden
        self.kernel = kernel
        self.steps = steps
        self.conv = nn.Conv2d(c, c, kernel, padding=kernel // 2)
        self.reduce = nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.up = nn.Conv2d(c, hidden, 1)
        self.down = nn.Conv2d(hidden, c, 1)
        self.merge = nn.Conv2d(hidden + c, c, 1)

    @typed_flops
    def forward(self, x: Float[Tensor, "batch c h w"]) -> Float[Tensor, "batch c h2 w2"]:
        for step in self.steps:
            x = self.apply_step(step, x)
        return x

    def apply_step(self, step: str, x: Tensor) -> Tensor:
        """One step: (batch, c, h, w) -> (batch, c, h', w')."""
        out: Tensor
        if step == "conv":
            out = self.conv(x)
            return out
        if step == "strided":
            out = self.reduce(x)
            return out
        if step == "pool":
            return F.max_pool2d(x, 3, 2, 1)
        if step == "upsample":
            return F.interpolate(x, scale_factor=2, mode="nearest")
        if step == "mlp":
            out = self.down(F.relu(self.up(x)))
            return out
        if step == "concat":
            out = self.merge(torch.cat([self.up(x), x], 1))
            return out
        if step == "pad":
            return F.pad(x, (0, (-x.shape[3]) % 8, 0, (-x.shape[2]) % 8))
        if step == "rows":
            for i in range(x.shape[2]):
                x = x + x[:, :, i : i + 1]
            return x
        if step == "branch":
            if x.shape[3] > 5:
                x = x.sigmoid() * x
            return x
        raise ValueError(f"no step {step!r}")
