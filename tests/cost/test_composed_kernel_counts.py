"""Kernels that compute inside one op what would otherwise be several — ``conv_tbc``'s
products tap by tap, ``torch.dist``'s difference and norm, ``torch.polar``'s cosine and sine
— counted by hand, in a record and in an estimate alike; ``block_diag`` only copies. And a
body that ``estimate()`` cannot run (torch's function transforms) stops with one line that
names it and the way out."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from jaxtyping import Float
from torch import Tensor

import typedflops
from typedflops import record


def _tbc(pad: int) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    def body(x: Tensor, w: Tensor, bias: Tensor) -> Tensor:
        return torch.conv_tbc(x, w, bias, pad)

    return body


# Input 7 steps, batch 2, 4 channels in, 6 out, 3 taps. Tap k reaches the output steps
# [max(0, pad - k), min(7 + pad - k, out_steps)): pad 0 (5 steps out) 5 + 5 + 5 = 15 rows;
# pad 1 (7 out) 6 + 7 + 6 = 19; pad 2 (9 out) 7 + 7 + 7 = 21. Each row a product of
# 2·batch·C_in·C_out = 96 FLOPs; the bias is copied, not added.
@pytest.mark.parametrize(("pad", "rows"), [(0, 15), (1, 19), (2, 21)])
def test_conv_tbc_counts_its_taps_products(pad: int, rows: int) -> None:
    body = _tbc(pad)
    x = torch.randn(7, 2, 4, requires_grad=True)
    w = torch.randn(3, 4, 6, requires_grad=True)
    bias = torch.randn(6, requires_grad=True)
    with record() as rec:
        body(x, w, bias)
    assert rec.total.uncounted == ()
    assert rec.total.flops == rec.total.matmul_flops == 96 * rows
    with record() as ran:
        body(x, w, bias).sum().backward()
    assert ran.total.backward_flops == rec.total.backward_flops  # (predicted = what ran)
    weights = (Float[Tensor, "t b 4"], Float[Tensor, "3 4 6"], Float[Tensor, "6"])
    cost = typedflops.estimate(body, *weights, grad=("x", "w", "bias"), t=7, b=2)
    assert (cost.flops, cost.backward_flops, cost.matmul_flops) == (
        rec.total.flops,
        rec.total.backward_flops,
        rec.total.matmul_flops,
    )


def test_conv_tbc_formula_holds_at_other_lengths() -> None:
    body = _tbc(1)
    cost = typedflops.estimate(
        body, Float[Tensor, "t b 4"], Float[Tensor, "3 4 6"], Float[Tensor, "6"], t=7, b=2
    )
    assert cost.exact
    for steps in (1, 2, 3, 11):
        with record() as rec:
            body(torch.randn(steps, 3, 4), torch.randn(3, 4, 6), torch.randn(6))
        values = {s: steps if s.name == "t" else 3 for s in cost.formula.free_symbols}
        assert int(cost.formula.subs(values)) == rec.total.flops


def test_dist_counts_the_difference_and_its_norm() -> None:
    x, y = torch.randn(2, 1, 8), torch.randn(4, 8)
    with record() as rec:
        torch.dist(x, y, 3)
    # the broadcast difference has 2·4·8 = 64 values: a subtract, a square and an add
    # each, then one root
    assert rec.total.uncounted == ()
    assert rec.total.flops == 3 * 64 + 1
    cost = typedflops.estimate(
        lambda a, b: torch.dist(a, b, 3),
        Float[Tensor, "b 1 d"],
        Float[Tensor, "n d"],
        b=2,
        n=4,
        d=8,
    )
    assert cost.flops == 193


def test_polar_counts_a_cosine_a_sine_and_two_multiplies() -> None:
    size, angle = torch.rand(2, 8) + 0.1, torch.randn(2, 8)
    with record() as rec:
        torch.polar(size, angle)
    assert rec.total.uncounted == ()
    assert rec.total.flops == 4 * 16


def test_block_diag_is_a_copy() -> None:
    with record() as rec:
        torch.block_diag(torch.randn(4, 4), torch.randn(3, 3))  # type: ignore[no-untyped-call]
    assert rec.total.uncounted == ()
    assert rec.total.flops == 0


def test_estimate_through_torch_func_grad_counts_it_and_names_the_memory_it_cannot() -> None:
    def body(x: Tensor) -> Tensor:
        out: Tensor = torch.func.grad(lambda t: (t @ t.T).sum())(x)
        return out

    # (torch.func refuses the saved-tensor hooks that measure activation memory: the runs
    # go without them, the FLOPs counted, the memory listed as not)
    cost = typedflops.estimate(body, Float[Tensor, "n k"], n=4, k=5)
    with record() as rec:  # (a real run counts the products it runs)
        body(torch.randn(4, 5))
    assert rec.total.matmul_flops == 2 * 4 * 5 * 4
    assert (cost.flops, cost.backward_flops) == (rec.total.flops, rec.total.backward_flops)
    assert cost.forward.exact and cost.backward.exact
    assert not cost.activation.exact and not cost.exact
    assert any(entry.startswith("activation memory") for entry in cost.uncounted)


@pytest.mark.parametrize(("batch", "seq"), [(0, 4), (2, 0)])
def test_attention_on_an_empty_batch_or_sequence_is_estimated_as_it_runs(
    batch: int, seq: int
) -> None:
    """Torch's attention on an empty input, before it picks a kernel, returns zeros plus
    the inputs' sums times 0 (two adds and a multiply of scalars: 3 FLOPs; its backward
    1): an estimate gives what a record of the real run counts, and marks it inexact (the
    ops at 0 are not those at other sizes)."""

    def body(q: Tensor) -> Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    q = torch.randn(batch, 2, seq, 8, requires_grad=True)
    with record() as rec:
        body(q)
    assert (rec.total.flops, rec.total.backward_flops) == (3, 1)
    cost = typedflops.estimate(body, Float[Tensor, "b 2 s 8"], grad=("q",), b=batch, s=seq)
    assert (cost.flops, cost.backward_flops) == (3, 1)
    assert not cost.exact
