"""Values a dry run knows from shapes: position ids from ``arange``, masks of ones, small
constant buffers, and what ops make of them. A body that reads one (as transformers'
models ask whether position ids hold packed sequences, and skip the attention mask when
they do not) takes the path a real run takes: ``estimate()`` equals a record of a real
run, op for op, forward and backward. A read of a value no shape fixes (an input's) still
stops the dry run with one line.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from real_runs import ran
from torch import Tensor, nn
from torch._subclasses.fake_tensor import is_fake

from typedflops import estimate, record, typed_flops
from typedflops.errors import DryRunError


class GroupedQueryAttention(nn.Module):
    """Grouped-query self-attention over ``(batch, seq, 32)``, 4 query heads sharing 2 key
    and value heads, written as transformers writes its models: where the position ids are
    one sequence per row (read from their values, unless the tensors are fake, as under
    tracing) it passes no mask and lets the kernel share the heads (``enable_gqa``); else it
    builds a mask and repeats the key and value heads (an ``expand``, whose backward sums)."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(32, 32)
        self.kv = nn.Linear(32, 32)

    def forward(self, x: Float[Tensor, "b s 32"]) -> Tensor:
        b, s, _ = x.shape
        positions = torch.arange(s, device=x.device).unsqueeze(0).expand(b, s)
        starts = (torch.diff(positions, prepend=positions[:, :1] - 1) != 1).cumsum(-1)
        one_sequence = not is_fake(starts) and bool((starts[:, -1] == 0).all())
        q = self.q(x).view(b, s, 4, 8).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, 2, 8).permute(2, 0, 3, 1, 4)
        if one_sequence:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            k = k[:, :, None].expand(b, 2, 2, s, 8).reshape(b, 4, s, 8)
            v = v[:, :, None].expand(b, 2, 2, s, 8).reshape(b, 4, s, 8)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.sum()


def test_a_path_chosen_by_position_ids_is_the_real_runs() -> None:
    # before: the dry run could not read the ids on meta, went on under FakeTensorMode and
    # took the masked path, whose repeated heads' backward (b*2*2*s*8 adds each for the
    # keys and values: 1,024 at b=2, s=8) no real run runs; the Cost was not exact
    torch.manual_seed(0)
    model = GroupedQueryAttention()
    cost = estimate(model, Float[Tensor, "b s 32"], b=2, s=8, grad=("x",))
    assert (cost.flops, cost.backward_flops) == ran(
        model, torch.randn(2, 8, 32, requires_grad=True)
    )
    # every row exact but causal attention's: a CPU's flash kernel computes every pair up to
    # 512 keys and fewer past them (tests/cost/test_causal_attention.py), so neither its row
    # nor the Cost is exact in s
    rows = [op for op in cost.ops if op.op != "scaled_dot_product_attention"]
    assert all(op.forward.exact and op.backward.exact for op in rows)
    assert len(rows) == len(cost.ops) - 1 and not cost.exact
    other = torch.randn(3, 5, 32, requires_grad=True)
    assert (cost.forward.at({"b": 3, "s": 5}), cost.backward.at({"b": 3, "s": 5})) == ran(
        model, other
    )


class Masked(nn.Module):
    """Token embeddings, dropped out, summed where a mask of ones made from the ids' shape
    is set (``x[mask]``: ``nonzero`` of the mask), with a check of the positions' values."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.register_buffer("positions", torch.arange(64), persistent=False)

    def forward(self, ids: Int[Tensor, "b s"]) -> Tensor:
        mask = torch.ones_like(ids, dtype=torch.bool)
        x = F.dropout(self.embed(ids), 0.1)  # (a random write in place: forgets nothing else)
        positions = self.positions[: ids.shape[1]]  # type: ignore[index]
        if (positions[1:] - positions[:-1] != 1).any():
            raise ValueError("positions are not consecutive")
        return x[mask].sum()


def test_a_mask_and_a_buffer_whose_values_shapes_fix_are_read_as_a_real_run_reads_them() -> None:
    model = Masked()
    cost = estimate(model, Int[Tensor, "b s"], b=2, s=8)
    assert (cost.flops, cost.backward_flops) == ran(model, torch.randint(0, 50, (2, 8)))
    assert cost.exact


@typed_flops
def positive_part(x: Float[Tensor, " n"]) -> Float[Tensor, ""]:
    return x[x > 0].sum()


def test_a_value_no_shape_fixes_still_stops_the_dry_run_in_one_line() -> None:
    with pytest.raises(DryRunError) as info:
        estimate(positive_part, n=8)
    assert "\n" not in str(info.value)
    assert "nonzero" in str(info.value) and "record()" in str(info.value)


class Experts(nn.Module):
    """A mixture of 4 experts over ``(tokens, 16)``: each token to its top expert, the
    tokens sorted by expert and multiplied by one grouped product (``F.grouped_mm``, the
    kernel of transformers' MoE layers)."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(16, 4)
        self.weight = nn.Parameter(torch.randn(4, 16, 8))

    def forward(self, x: Float[Tensor, "t 16"]) -> Tensor:
        expert = self.router(x).argmax(-1)
        order = expert.argsort()
        counts = torch.histc(expert.float(), bins=4, min=0, max=3)  # (as transformers counts)
        offs = counts.cumsum(0).to(torch.int32)
        out = torch._grouped_mm(x[order], self.weight, offs=offs)
        return (out * out).sum()


def test_a_grouped_product_counts_the_rows_its_groups_cover() -> None:
    torch.manual_seed(0)
    model = Experts()
    x = torch.randn(12, 16, requires_grad=True)
    flops, backward = ran(model, x)
    # the router (2*12*16*4 and its bias 12*4), argmax, argsort and bincount (counted by
    # their rules as a record runs them) aside, the grouped product: its groups cover all
    # 12 rows, 2*12*16*8 = 3,072; its backward one product per operand, 6,144
    with record() as rec:
        model(x)
    grouped = [op for op in rec.total.ops if op.op == "_grouped_mm"]
    assert [(op.flops, op.backward_flops) for op in grouped] == [(3_072, 6_144)]
    assert rec.total.backward_flops == backward
    assert rec.total.matmul_flops == 2 * 12 * 16 * 4 + 3_072
    with pytest.raises(DryRunError) as info:
        estimate(model, Float[Tensor, "t 16"], t=12)
    assert "_grouped_mm" in str(info.value) and "record()" in str(info.value)
    assert flops > 3_072


def test_a_grouped_product_covers_only_the_rows_offs_reach() -> None:
    x, w = torch.randn(10, 4, requires_grad=True), torch.randn(4, 4, 8, requires_grad=True)
    offs = torch.tensor([2, 2, 6, 9], dtype=torch.int32)  # 9 of 10 rows: 2, 0, 4 and 3
    with record() as rec:
        out = torch._grouped_mm(x, w, offs=offs)
    bounds = [(0, 2), (2, 2), (2, 6), (6, 9)]
    by_hand = torch.cat([x[a:b] @ w[g] for g, (a, b) in enumerate(bounds)])
    torch.testing.assert_close(out[:9], by_hand)
    assert (rec.total.flops, rec.total.backward_flops) == (2 * 9 * 4 * 8, 2 * 2 * 9 * 4 * 8)
    with record() as ran:
        (torch._grouped_mm(x, w, offs=offs) * torch.ones(10, 8)).sum().backward()
    # the multiply's backward (80) and the two grouped products (576 each)
    assert ran.total.backward_flops == 80 + 2 * 576
