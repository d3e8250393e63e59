"""An object standing in for a dtype under a dtype's name, jaxtyping imported as a module:
``Float['b n']`` is a variable used as a type, reported as plain mypy reports it; typedflops
adds one note for the module and still checks the einops patterns."""

from __future__ import annotations

import jaxtyping
from einops import rearrange, reduce
from torch import Tensor


class Typed:
    def __init__(self, dtype):
        self.dtype = dtype

    def __getitem__(self, dims: str):
        return self.dtype[Tensor, dims]


Float = Typed(jaxtyping.Float)


def masked_mean(t: Float["b n d"], mask: Float["b n"]) -> Float["b d"]:
    t = t * rearrange(mask, "b n -> b n 1")
    return reduce(t, "b n d -> b d", "sum") / reduce(mask, "b n -> b 1", "sum")
