"""An op with several outputs is differentiated for the outputs a gradient reaches, as
autograd runs its backward with no gradient for the others: ``torch.var_mean(x, 1)[1]``
costs the mean's backward, not the variance's. Each count is held on meta
(``estimate()``), on a real CPU run (``record()``, in its own code and in a decorated
call's row), against the backward autograd ran there (a record around ``.backward()``:
its total is exact only where the prediction is what ran), and, for the products,
against FlopCounterMode around the same backward.

Inputs are float64, 4 x 5 unless said (20 values, 4 rows of 5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from jaxtyping import Float
from kernel_counts import on_cpu, on_meta
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

import typedflops
from typedflops import record, typed_flops

M = Float[Tensor, "m n"]
SQUARE = Float[Tensor, "n n"]
WIDE = {"m": 4, "n": 5}


def _both_summed(pair: tuple[Tensor, ...]) -> Tensor:
    return pair[0].sum() + pair[1].sum()


# (name, body, annotation, sizes, backward, products: FlopCounterMode's part of it)
CASES: list[tuple[str, Callable[[Tensor], Tensor], Any, dict[str, int], int, int]] = [
    # the mean's gradient spread over its row: 20 divides by 5 (the variance's 68 before)
    ("var_mean-mean", lambda x: torch.var_mean(x, 1)[1].sum(), M, WIDE, 20, 0),
    # the variance's: 2/(n-1) times the gradient (4), the mean again (20 adds, 4
    # divides), x minus it (20), the product (20)
    ("var_mean-var", lambda x: torch.var_mean(x, 1)[0].sum(), M, WIDE, 4 + 24 + 20 + 20, 0),
    # both: the two and the add of their 20 values
    (
        "var_mean-both",
        lambda x: _both_summed(torch.var_mean(x, 1)),
        M,
        WIDE,
        68 + 20 + 20,
        0,
    ),
    ("std_mean-mean", lambda x: torch.std_mean(x, 1)[1].sum(), M, WIDE, 20, 0),
    # the deviation's: the variance's 68, halved over the deviation (2·std, a divide, a
    # test for 0: 4 each)
    ("std_mean-std", lambda x: torch.std_mean(x, 1)[0].sum(), M, WIDE, 68 + 3 * 4, 0),
    # S alone: U·diag(gS)·Vᴴ, gS into U's 16 values and one product 2·4·4·5 (484 before:
    # U's terms)
    ("svdvals", lambda x: torch.linalg.svdvals(x).sum(), M, WIDE, 16 + 160, 160),
    ("nuclear-norm", lambda x: torch.linalg.matrix_norm(x, "nuc"), M, WIDE, 16 + 160, 160),
    # V's terms: five products of 160, two subtracts of 16 and of 20, divides of 16 and
    # 20, an add of 20, products with S of 4 and 16
    (
        "svd-Vh",
        lambda x: torch.linalg.svd(x, full_matrices=False)[2].sum(),
        M,
        WIDE,
        5 * 160 + 2 * 16 + 16 + 20 + 20 + 20 + 4 + 16,
        800,
    ),
    # U's and S's (484 before: U's alone): two products of 128 and one of 160, S's 16
    # scaled, two subtracts and a divide of 16, an add of 16, a product with S of 4
    (
        "svd-U-and-S",
        lambda x: _both_summed(torch.linalg.svd(x, full_matrices=False)[:2]),
        M,
        WIDE,
        2 * 128 + 160 + 16 + 2 * 16 + 16 + 16 + 4,
        416,
    ),
    # R alone of a 6 x 4 QR (Q's too before: 540): products 2·4·4·4 and 2·6·4·4, an add of
    # 16, a halving of the diagonal (4), a triangular solve of 6 rows by 4 (6·16)
    (
        "qr-R",
        lambda x: torch.linalg.qr(x)[1].sum(),
        M,
        {"m": 6, "n": 4},
        128 + 192 + 16 + 4 + 96,
        320,
    ),
    # the eigenvalues' V·diag(gL)·Vᴴ: gL into V's 16, a product 2·4³ = 128
    ("eigh-values", lambda x: torch.linalg.eigh(x)[0].sum(), SQUARE, {"n": 4}, 16 + 128, 128),
    # the eigenvectors' (the eigenvalues' 144 before): three products of 128, the
    # eigenvalues' differences (2 subtracts of 16), a divide and a product of 16
    (
        "eigh-vectors",
        lambda x: torch.linalg.eigh(x)[1].sum(),
        SQUARE,
        {"n": 4},
        3 * 128 + 2 * 16 + 16 + 16,
        384,
    ),
]


def _sizes(annotation: Any, sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(sizes[dim] for dim in annotation.dim_str.split())


def _decorated(body: Callable[[Tensor], Tensor], annotation: Any) -> Callable[[Tensor], Tensor]:
    """``body`` as a checked call taking ``annotation`` and returning a scalar."""

    def call(x: Tensor) -> Tensor:
        return body(x)

    call.__annotations__ = {"x": annotation, "return": Float[Tensor, ""]}
    return typed_flops(call)


@pytest.mark.parametrize(
    ("body", "annotation", "sizes", "backward", "products"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_the_outputs_used_are_differentiated(
    body: Callable[[Tensor], Tensor],
    annotation: Any,
    sizes: dict[str, int],
    backward: int,
    products: int,
) -> None:
    assert on_meta(body, [annotation], sizes).backward == backward
    assert on_cpu(body, [annotation], sizes).backward == backward
    x = torch.randn(*_sizes(annotation, sizes), dtype=torch.float64, requires_grad=True)
    checked = _decorated(body, annotation)
    # a decorated call's row, with and without the backward run in the block; the total
    # with it is what autograd ran, exact where that is the prediction
    for run_backward in (False, True):
        with record() as rec:
            out = checked(x)
            if run_backward:
                out.backward()
        (row,) = rec.calls
        assert row.cost().backward_flops == backward
        assert rec.total.backward_flops == backward
        # (a backward count that ran and differs from the prediction is marked not exact;
        # the forward's formulas may be, as a QR's is where m > n only)
        assert rec.total.backward.exact == row.cost().backward.exact
    # the products of the backward autograd runs, as FlopCounterMode counts them
    with FlopCounterMode(display=False) as counter:
        out = body(x)
        before = counter.get_total_flops()
        out.backward()
    assert counter.get_total_flops() - before == products


def test_a_backward_that_ran_is_the_prediction() -> None:
    # the total of a record around the backward is exact only where what ran is what was
    # predicted: the mean's 20, not the variance's 68 (the variance's at 68, as before)
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    for index, expected in ((1, 20), (0, 68)):
        with record() as rec:
            torch.var_mean(x, 1)[index].sum().backward()
        assert (rec.total.backward_flops, rec.total.backward.exact) == (expected, True)


@typed_flops
def pick(x: Float[Tensor, "m n"], index: int) -> Float[Tensor, ""]:
    return torch.var_mean(x, 1)[index].sum()


@typed_flops
def mixed(x: Float[Tensor, "m n"]) -> Float[Tensor, ""]:
    mean = torch.var_mean(x, 1)[1].sum()
    return mean + torch.var_mean(x, 1)[0].sum() + torch.var_mean(x, 1)[1].sum()


def test_calls_using_other_outputs_are_counted_apart() -> None:
    # one op signature, reached through its mean in one call and its variance in another:
    # each call's backward is its own (the count of one is never the other's)
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    with record() as rec:
        for index in (1, 0, 1, 1, 0):
            pick(x, index)
    assert [(row.calls, row.cost().backward_flops) for row in rec.calls] == [(3, 20), (2, 68)]
    assert rec.total.backward_flops == 3 * 20 + 2 * 68
    # in one function: the means' 20 twice, the variance's 68, and x read by three ops
    # that reach backward sums its three gradients (2 adds of its 20 values)
    expected = 20 + 68 + 20 + 2 * 20
    cost = typedflops.estimate(mixed, M, dtype=torch.float64, grad=("x",), m=4, n=5)
    assert (cost.backward_flops, cost.exact) == (expected, True)
    with record() as rec:
        mixed(x).backward()
    assert (rec.total.backward_flops, rec.total.exact) == (expected, True)


def test_a_record_own_code_holds_what_it_keeps() -> None:
    # outside decorated calls an output let go while another of its op is held is no
    # result; both held are (a backward may start from either: 108, as both used)
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    with record() as rec:
        mean = torch.var_mean(x, 1)[1]
    assert rec.total.backward_flops == 20
    with record() as rec:
        both = torch.var_mean(x, 1)
    assert rec.total.backward_flops == 68 + 20 + 20
    del mean, both


DROPPED: list[tuple[str, Callable[[Tensor], Any]]] = [
    ("var_mean", lambda x: torch.var_mean(x, 1)),
    ("var_mean-mean", lambda x: torch.var_mean(x, 1)[1]),
    ("var_mean-var", lambda x: torch.var_mean(x, 1)[0]),
    ("std_mean", lambda x: torch.std_mean(x, 1)),
    ("aminmax", lambda x: torch.aminmax(x, dim=1)),
    ("qr", lambda x: torch.linalg.qr(x)),
    ("svd", lambda x: torch.linalg.svd(x, full_matrices=False)),
    ("slogdet", lambda x: torch.linalg.slogdet(x[:, :4])),
]


@pytest.mark.parametrize("body", [case[1] for case in DROPPED], ids=[case[0] for case in DROPPED])
def test_outputs_dropped_by_a_records_own_code_are_what_the_function_returns(
    body: Callable[[Tensor], Any],
) -> None:
    # a tuple of outputs dropped whole is a result each, as an estimate of the function
    # returning it takes each; one picked out of it is the result alone: the prediction
    # is the backward from every output returned
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    with record() as predicted:
        body(x)
    with record() as ran:
        out = body(x)
        outputs = out if isinstance(out, tuple) else (out,)
        sum(o.sum() for o in outputs if o.is_floating_point()).backward()
    cost = typedflops.estimate(body, M, dtype=torch.float64, grad=("x",), m=4, n=5)
    # (the sums' backward is free: a gradient spread, the scalars' adds pass it on)
    assert predicted.total.backward_flops == ran.total.backward_flops == cost.backward_flops
    assert ran.total.exact


TWO = [M, M]

# (name, body, backward): 4 x 5 inputs a and b; a product by a number is 20 multiplies,
# and so is its backward
FOREACH: list[tuple[str, Callable[[Tensor, Tensor], Tensor], int]] = [
    # the first output's gradient goes to a alone: b's own product's (20) is its only one
    ("first", lambda a, b: torch._foreach_mul([a, b], 2.0)[0].sum() + (b * 3).sum(), 40),
    # the second's goes to b, which sums it with its product's: 20 + 20 + 20
    ("second", lambda a, b: torch._foreach_mul([a, b], 2.0)[1].sum() + (b * 3).sum(), 60),
    # both: 20 each, b's product's 20 and b's sum
    ("both", lambda a, b: _both_summed(torch._foreach_mul([a, b], 2.0)) + (b * 3).sum(), 80),
    # the second's only: b.exp()'s backward (20) is reached, a.exp()'s is not
    ("made", lambda a, b: torch._foreach_mul([a.exp(), b.exp()], 2.0)[1].sum(), 20 + 20),
]


@pytest.mark.parametrize(
    ("body", "backward"), [case[1:] for case in FOREACH], ids=[case[0] for case in FOREACH]
)
def test_outputs_that_send_gradients_to_different_inputs(
    body: Callable[[Tensor, Tensor], Tensor], backward: int
) -> None:
    # each output of a foreach op has its own input's gradient: the inputs that get one,
    # and so the sums where they meet, are those of the outputs reached
    assert on_meta(body, TWO, WIDE).backward == backward
    assert on_cpu(body, TWO, WIDE).backward == backward
    a, b = (torch.randn(4, 5, dtype=torch.float64, requires_grad=True) for _ in range(2))
    with record() as rec:
        body(a, b).backward()
    assert rec.total.backward_flops == backward
