"""record() names the ops of a decorated call by the call in its body that ran them."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import einsum, record, typed_flops
from typedflops.cost.types import OpCost


def _rows(ops: tuple[OpCost, ...]) -> list[tuple[str, int]]:
    return [(op.op, op.flops) for op in ops]


def _scale(x: Tensor) -> Tensor:
    return x * 2 + 1


@typed_flops
def mixed(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "n d"]:
    h = torch.relu(x @ w)
    h = h.softmax(-1)
    h = h - x
    h = einsum(h, w, "n d, d e -> n e")
    return _scale(h)


def test_a_decorated_call_names_its_ops_after_the_calls_in_its_body() -> None:
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    with record() as rec:
        mixed(x, w)
    (row,) = rec.calls
    assert _rows(row.cost().ops) == [
        ("matmul", 96),
        ("relu", 12),
        ("softmax", 60),
        ("sub", 12),
        ("einsum", 96),
        ("_scale", 24),  # a helper's ops: one row, named after the helper
    ]
    assert row.cost().ops[4].pattern == "n d, d e -> n e"


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4, bias=False)

    @typed_flops
    def forward(self, x: Float[Tensor, "n 4"]) -> Float[Tensor, "n 4"]:
        y: Tensor = F.gelu(self.proj(x))
        for _ in range(3):  # one call site, run three times: one row
            y = y * 2
        return y


def test_a_module_call_and_a_loop_are_one_row_each() -> None:
    with record() as rec:
        Block()(torch.randn(2, 4))
    names = [op.op for op in rec.calls[0].cost().ops]
    assert names == ["proj", "gelu", "mul"]
    assert rec.calls[0].cost().ops[2].flops == 3 * 8


def test_calls_that_name_their_ops_alike_share_a_row() -> None:
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    with record() as rec:
        for _ in range(5):
            mixed(x, w)
    assert [row.calls for row in rec.calls] == [5]


def test_code_without_source_names_each_op_after_itself() -> None:
    namespace: dict[str, object] = {"torch": torch, "Tensor": Tensor, "Float": Float}
    exec(
        "def body(x: Float[Tensor, 'n d'], w: Float[Tensor, 'd d']) -> Float[Tensor, 'n d']:\n"
        "    return torch.tanh(x @ w)\n",
        namespace,
    )
    compiled = typed_flops(namespace["body"])  # type: ignore[call-overload]
    with record() as rec:
        compiled(torch.randn(3, 4), torch.randn(4, 4))
    assert _rows(rec.calls[0].cost().ops) == [("matmul", 96), ("tanh", 12)]
