from typing import Any

from torch import nn

from . import RearrangeMixin, ReduceMixin

# einops leaves forward unannotated: any input, any result.
class Rearrange(RearrangeMixin, nn.Module):
    def forward(self, input: Any) -> Any: ...

class Reduce(ReduceMixin, nn.Module):
    def forward(self, input: Any) -> Any: ...

class EinMix(nn.Module):
    def __init__(
        self, pattern: str, weight_shape: str, bias_shape: str | None = None, **axes_lengths: Any
    ) -> None: ...
    def forward(self, input: Any) -> Any: ...
