from typing import Any

from torch import Tensor, nn

from . import RearrangeMixin, ReduceMixin

class Rearrange(RearrangeMixin, nn.Module):
    def forward(self, input: Tensor) -> Tensor: ...

class Reduce(ReduceMixin, nn.Module):
    def forward(self, input: Tensor) -> Tensor: ...

class EinMix(nn.Module):
    def __init__(
        self, pattern: str, weight_shape: str, bias_shape: str | None = None, **axes_lengths: Any
    ) -> None: ...
    def forward(self, input: Tensor) -> Tensor: ...
