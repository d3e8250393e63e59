"""Reduced from the patterns of alphafold3-pytorch: jaxtyping's dtypes rebound to an
object that supplies the array type (``Float['b n d']``), einops throughout. mypy reports
those annotations as plain mypy does; typedflops adds one note for the module and still
checks the einops patterns."""

from __future__ import annotations

from beartype import beartype
from einops import einsum, rearrange, repeat
from jaxtyping import Bool, Float, Int, jaxtyped
from torch import Tensor, nn


class TorchTyping:
    def __init__(self, abstract_dtype):
        self.abstract_dtype = abstract_dtype

    def __getitem__(self, shapes: str):
        return self.abstract_dtype[Tensor, shapes]


Float = TorchTyping(Float)
Int = TorchTyping(Int)
Bool = TorchTyping(Bool)

typecheck = jaxtyped(typechecker=beartype)


def exists(v):
    return v is not None


class OuterProductMean(nn.Module):
    def __init__(self, dim_msa: int = 8, dim_pairwise: int = 16, dim_hidden: int = 4) -> None:
        super().__init__()
        self.to_hidden = nn.Linear(dim_msa, dim_hidden * 2, bias=False)
        self.to_pairwise_repr = nn.Linear(dim_hidden**2, dim_pairwise)

    @typecheck
    def forward(
        self, msa: Float["b s n dm"], *, mask: Bool["b n"] | None = None
    ) -> Float["b n n dp"]:
        a, b = self.to_hidden(msa).chunk(2, dim=-1)
        outer_product = einsum(a, b, "b s i d, b s j e -> b i j d e")
        num_msa = msa.shape[1]
        outer_product_mean = outer_product / num_msa
        outer_product_mean = rearrange(outer_product_mean, "... d e -> ... (d e)")
        if exists(mask):
            pair_mask = rearrange(mask, "b i -> b i 1") * rearrange(mask, "b j -> b 1 j")
            outer_product_mean = outer_product_mean * rearrange(pair_mask, "... -> ... 1")
        return self.to_pairwise_repr(outer_product_mean)


@typecheck
def full_pairwise(t: Float["b n d"], window: int) -> Float["b n n d"]:
    return repeat(t, "b i d -> b i j d", j=t.shape[1])
