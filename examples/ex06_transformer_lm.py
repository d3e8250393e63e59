"""A transformer LM written with plain modules: its FLOPs as a formula in batch and seq.

Nothing here is typedflops-specific but the decorator: plain ``nn.Module``s, forwards
annotated ``"... d_model"`` as course code writes them, einops and raw torch mixed, a causal
mask built inside ``forward`` without ``device=``, integer token ids. ``estimate`` dry-runs
the model on meta tensors and fits the formula; FlopCounterMode checks the matmuls.

Run: ``python examples/ex06_transformer_lm.py``
"""

from __future__ import annotations

import math
import sys

import sympy
import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import einsum, rearrange, record, typed_flops


class RMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    @typed_flops
    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    @typed_flops
    def forward(self, x: Float[Tensor, "... seq d_model"]) -> Float[Tensor, "... seq d_model"]:
        q, k, v = rearrange(
            self.qkv(x), "... seq (three h d) -> three ... h seq d", three=3, h=self.n_heads
        )
        scores = einsum(q, k, "... h i d, ... h j d -> ... h i j") / math.sqrt(q.shape[-1])
        seq = x.shape[-2]
        causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
        weights = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        mixed = einsum(weights, v, "... h i j, ... h j d -> ... h i d")
        out: Tensor = self.out(rearrange(mixed, "... h seq d -> ... seq (h d)"))
        return out


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.d_ff = d_ff
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)

    @typed_flops
    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        out: Tensor = self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))
        return out


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.norm1, self.attn = RMSNorm(d_model), Attention(d_model, n_heads)
        self.norm2, self.ffn = RMSNorm(d_model), SwiGLU(d_model, d_ff)

    @typed_flops
    def forward(self, x: Float[Tensor, "... seq d_model"]) -> Float[Tensor, "... seq d_model"]:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class TransformerLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_layers: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.d_model, self.n_layers, self.d_ff = d_model, n_layers, d_ff
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.norm = RMSNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    @typed_flops
    def forward(self, ids: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq vocab"]:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        logits: Tensor = self.head(self.norm(x))
        return logits


def main(quick: bool = False) -> None:
    """Print the LM's forward and backward FLOPs as formulas, and check them."""
    torch.manual_seed(0)
    model = TransformerLM(vocab=1000, d_model=64, n_layers=2 if quick else 4, n_heads=4, d_ff=176)
    cost = TransformerLM.forward.estimate(model, batch=4, seq=32)
    print(f"forward FLOPs at batch=4, seq=32: {cost.flops:,}")
    print(f"  = {cost.formula}")
    print(f"backward: {cost.backward_formula}")
    batch, seq = sympy.symbols("batch seq")
    sizes = {name: size for name, size in cost.dims.items() if name not in ("batch", "seq")}
    per_token = sympy.expand(cost.formula / (batch * seq)).subs(sizes)
    print(f"per token, as a function of the context length seq: {per_token}")

    # A formula is a function of the dims: at other sizes it gives the count of a dry run.
    other = TransformerLM.forward.estimate(model, batch=2, seq=48)
    predicted = int(cost.formula.subs({**cost.dims, "batch": 2, "seq": 48}))
    print(f"batch=2, seq=48: formula {predicted:,}, dry run {other.flops:,}")
    assert predicted == other.flops

    # What ran: a real forward and backward, against torch's own counter on its matmuls.
    ids = torch.randint(0, 1000, (4, 32))
    with FlopCounterMode(display=False) as counter, record() as rec:
        logits = model(ids)
    print(
        f"record(): {rec.total.flops:,} FLOPs; FlopCounterMode (matmuls only): "
        f"{counter.get_total_flops():,}"
    )
    assert rec.total.flops == cost.flops
    with FlopCounterMode(display=False) as backward:
        logits.sum().backward()
    print(f"backward of the matmuls: FlopCounterMode {backward.get_total_flops():,}")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
