"""Dense linear algebra by LAPACK Working Note 41's operation counts, forward and the backward
torch composes, held against hand counts on a real CPU run (``record()``) and on meta
(``estimate()``): one count for both.

At n = 4 (a multiply and an add are a FLOP each): Cholesky n³/3 + n²/2 + n/6 = 30; LU
2n³/3 - n²/2 + 5n/6 = 38; a solve from the LU 2n² - n = 28 per right-hand side, from a
Cholesky factor 2n² = 32; a triangular solve n² = 16. A 4 x 4 matrix product is 2·4³ = 128.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from jaxtyping import Float
from kernel_counts import Counts, flop_counter_total, on_cpu, on_meta
from torch import Tensor

import typedflops

A = Float[Tensor, "n n"]
B = Float[Tensor, "n k"]
SIZES = {"n": 4, "k": 3}
CHOLESKY, LU, LU_SOLVE, CHOLESKY_SOLVE, TRIANGULAR, PRODUCT = 30, 38, 28, 32, 16, 128

CASES: list[tuple[str, Any, list[Any], int, int]] = [
    # backward: L^H·gL (a product), 0.5·(gA + tril(gA)^H) (16 + 16), two triangular solves
    # against n right-hand sides
    (
        "cholesky",
        lambda a: torch.linalg.cholesky_ex(a).L,
        [A],
        CHOLESKY,
        PRODUCT + 2 * 16 + 2 * 4 * TRIANGULAR,
    ),
    # the LU and 3 solves; backward: the adjoint's 3 solves, -gB·X^H (2·4·3·4 and a negate)
    (
        "solve",
        lambda a, b: torch.linalg.solve(a, b),
        [A, B],
        LU + 3 * LU_SOLVE,
        3 * LU_SOLVE + 96 + 16,
    ),
    # the LU and a solve against the identity (4 right-hand sides); backward -X^H·g·X^H
    ("inverse", lambda a: torch.linalg.inv_ex(a).inverse, [A], LU + 4 * LU_SOLVE, 2 * PRODUCT + 16),
    # backward: three products, an add, a triangular solve with L's unit diagonal (n² - n
    # per right-hand side) and one with U
    (
        "lu-factor",
        lambda a: torch.linalg.lu_factor(a).LU,
        [A],
        LU,
        3 * PRODUCT + 16 + 4 * (TRIANGULAR - 4) + 4 * TRIANGULAR,
    ),
    # 3 right-hand sides; backward the adjoint's solves, -gB·X^H and a negate
    (
        "solve-triangular",
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
        [A, B],
        3 * TRIANGULAR,
        3 * TRIANGULAR + 96 + 16,
    ),
    # the LU, the diagonal's product (4) and the pivots' sign; backward det·A^-H: a product,
    # a compare per diagonal value, an add of 16, a solve for 4 right-hand sides
    ("det", lambda a: torch.linalg.det(a), [A], LU + 4 + 1, 1 + 4 + 16 + 4 * LU_SOLVE),
    # per diagonal value: a sign and its product, an absolute value, a log and the sum
    ("slogdet", lambda a: torch.linalg.slogdet(a).logabsdet, [A], LU + 5 * 4 + 1, 4 * LU_SOLVE),
    # two triangular solves per right-hand side; backward the same solves, two products, an
    # add and a negate
    (
        "cholesky-solve",
        lambda a, b: torch.cholesky_solve(b, a),
        [A, B],
        3 * CHOLESKY_SOLVE,
        3 * CHOLESKY_SOLVE + 96 + 16 + PRODUCT + 16,
    ),
]


@pytest.mark.parametrize(
    ("body", "annotations", "forward", "backward"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_linear_algebra_is_counted_by_lawn_41(
    body: Any, annotations: list[Any], forward: int, backward: int
) -> None:
    expected = Counts(forward, backward, ())
    assert on_cpu(body, annotations, SIZES) == expected
    assert on_meta(body, annotations, SIZES) == expected


def test_qr_of_a_tall_matrix_is_householder_and_the_forming_of_q() -> None:
    # 6 x 4, by LAWN 41: geqrf 122 multiplies and 86 adds; orgqr (Q of 6 x 4 from 4
    # reflectors) 84 and 68. Backward: two 4-column products with Q (2·4·6·4 each), adds of
    # 16 and 24, a negate of 16, a halving of the diagonal (4), a triangular solve for 6 rows
    expected = Counts(122 + 86 + 84 + 68, 2 * 192 + 16 + 24 + 16 + 4 + 6 * TRIANGULAR, ())
    sizes = {"m": 6, "n": 4}
    annotation = [Float[Tensor, "m n"]]
    assert on_cpu(lambda a: torch.linalg.qr(a).Q, annotation, sizes) == expected
    assert on_meta(lambda a: torch.linalg.qr(a).Q, annotation, sizes) == expected
    # The note's count branches on which of m and n is larger: the formula holds where m > n
    # only, so it is marked inexact (the count at these sizes stands)
    cost = typedflops.estimate(lambda a: torch.linalg.qr(a).Q, *annotation, m=6, n=4)
    assert (cost.flops, cost.exact) == (360, False)
    # R alone forms no Q
    assert on_cpu(lambda a: torch.linalg.qr(a, mode="r").R, annotation, sizes).forward == 208


def test_a_batch_of_factorisations_and_the_formula() -> None:
    cost = typedflops.estimate(
        lambda a: torch.linalg.cholesky_ex(a).L, Float[Tensor, "b n n"], b=3, n=4
    )
    assert cost.flops == 3 * CHOLESKY
    assert str(cost.formula) == "b*n*(n + 1)*(2*n + 1)/6"
    assert cost.exact
    # a square QR: geqrf 4n³/3 + 2n² + 14n/3 and orgqr 4n³/3 + n² - 4n/3
    cost = typedflops.estimate(lambda a: torch.linalg.qr(a).Q, A, n=5)
    assert (cost.flops, str(cost.formula), cost.exact) == (425, "n*(8*n**2 + 9*n + 10)/3", True)


def test_complex_factorisations_count_six_per_multiply_and_two_per_add() -> None:
    # Cholesky of 4 x 4: 20 multiplies and 10 adds; the LU 24 and 14, each solve from it 16 and 12
    x = torch.randn(4, 4, dtype=torch.complex64)
    assert on_cpu_complex(lambda: torch.linalg.cholesky_ex(x).L) == 6 * 20 + 2 * 10
    b = torch.randn(4, 3, dtype=torch.complex64)
    assert on_cpu_complex(lambda: torch.linalg.solve(x, b)) == 6 * 24 + 2 * 14 + 3 * (
        6 * 16 + 2 * 12
    )


def on_cpu_complex(body: Any) -> int:
    with typedflops.record() as rec:
        body()
    return rec.total.flops


@pytest.mark.parametrize(
    ("body", "op"),
    [
        (lambda a: torch.linalg.svd(a).S, "_linalg_svd"),
        (lambda a: torch.linalg.eigh(a).eigenvalues, "_linalg_eigh"),
    ],
)
def test_decompositions_that_iterate_are_named_not_counted(body: Any, op: str) -> None:
    # the sweeps until convergence depend on the values: no count from shapes holds
    for counts in (on_cpu(body, [A], SIZES), on_meta(body, [A], SIZES)):
        assert op in counts.uncounted


def test_flop_counter_mode_counts_only_the_backwards_products() -> None:
    x = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
    assert flop_counter_total(lambda: torch.linalg.cholesky_ex(x).L) == PRODUCT
