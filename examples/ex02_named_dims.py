"""Named dims: einsum, reduce and rearrange in typed functions, and what a shape error says.

Run: ``python examples/ex02_named_dims.py``
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import ShapeError, einsum, rearrange, record, reduce, typed_flops


@typed_flops
def attention_scores(
    q: Float[Tensor, "batch seq_q d"], k: Float[Tensor, "batch seq_k d"]
) -> Float[Tensor, "batch seq_q seq_k"]:
    """Scores of every query against every key: ``(batch, seq_q, seq_k)``."""
    return einsum(q, k, "batch seq_q d, batch seq_k d -> batch seq_q seq_k")


@typed_flops
def split_heads(
    x: Float[Tensor, "batch seq d_model"], heads: int
) -> Float[Tensor, "batch heads seq d_head"]:
    """``(batch, seq, heads*d_head)`` -> ``(batch, heads, seq, d_head)``."""
    return rearrange(x, "batch seq (heads d_head) -> batch heads seq d_head", heads=heads)


@typed_flops
def mean_pool(x: Float[Tensor, "batch seq d"]) -> Float[Tensor, "batch d"]:
    """Average over the sequence: ``(batch, seq, d)`` -> ``(batch, d)``."""
    return reduce(x, "batch seq d -> batch d", "mean")


def main() -> None:
    """Run the typed functions under ``record()`` and show a shape error."""
    q, k = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    with record() as rec:
        scores = attention_scores(q, k)
        heads = split_heads(q, heads=4)
        pooled = mean_pool(q)
    print("scores", tuple(scores.shape), "heads", tuple(heads.shape), "pooled", tuple(pooled.shape))
    print(rec.table())
    try:
        attention_scores(q, torch.randn(2, 7, 8))
    except ShapeError as error:
        print(f"\nShapeError: {error}")


if __name__ == "__main__":
    main()
