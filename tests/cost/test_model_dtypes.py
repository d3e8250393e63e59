"""A model moved to another floating dtype (``.double()``, ``.to(torch.bfloat16)``), whose
body fails on float32 inputs, is estimated with its ``Float[...]`` inputs at that dtype, as
a real call passes them: the estimate is the count and the bytes of the real call, not an
error. A model whose parameters hold several floating dtypes keeps the error (``dtype=``
chooses), and one that casts its float32 input itself is estimated at float32.

Hand counts, ``nn.Linear(8, 8)`` then ``relu`` on 3 rows: 2·3·8·8 = 384 for the product
(the bias not counted) and 24 for the relu, 408.
"""

from __future__ import annotations

import pytest
import torch
from filled import ones
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import estimate, record, typed_flops

FLOPS = 2 * 3 * 8 * 8 + 3 * 8


@typed_flops
class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: Float[Tensor, "b d"]) -> Float[Tensor, "b d"]:
        return torch.relu(self.lin(x))


def _plain() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU())


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("make", [_plain, Block])
def test_a_model_moved_to_a_dtype_is_estimated_at_it(make: type, dtype: torch.dtype) -> None:
    model = make().to(dtype)
    if isinstance(model, Block):
        cost = estimate(model, b=3, d=8)
    else:
        cost = estimate(model, Float[Tensor, "b d"], b=3, d=8)
    x = ones(3, 8, dtype=dtype)
    with record() as rec:
        model(x)
    ran = rec.calls[0].cost() if rec.calls else rec.total
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (
        ran.flops,
        ran.bytes_read,
        ran.bytes_written,
    )
    assert cost.flops == FLOPS


def test_a_model_of_several_dtypes_keeps_the_default() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8).double())
    with pytest.raises(Exception, match="dtype"):
        estimate(model, Float[Tensor, "b d"], b=3, d=8)
    cost = estimate(model[1], Float[Tensor, "b d"], b=3, d=8)
    assert cost.flops == 2 * 3 * 8 * 8


class Casts(nn.Module):
    """A half-precision layer that casts its float32 input itself."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8).to(torch.bfloat16)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.lin(x.to(torch.bfloat16))
        return out


def test_a_model_that_casts_its_input_is_estimated_at_float32() -> None:
    model, x = Casts(), ones(3, 8)
    cost = estimate(model, Float[Tensor, "b d"], b=3, d=8)
    with record() as rec:
        model(x)
    assert (cost.bytes_read, cost.bytes_written) == (rec.total.bytes_read, rec.total.bytes_written)
