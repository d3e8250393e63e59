"""The FLOP rules of dense linear algebra (``torch.linalg``): factorisations and solves, by
the operation counts of LAPACK Working Note 41 (Blackford and Dongarra, "Installation Guide
for LAPACK", its tables of multiplications and additions per routine, as MAGMA's and
PLASMA's ``flops.h`` carry them). A multiply and an add are a FLOP each, as everywhere in
typedflops (so a multiply-add is 2); on complex values a multiply is 6 real FLOPs and an add
2, as the note counts them. Per matrix of a batch, n its order:

- Cholesky (``potrf``): ``n³/3 + n²/2 + n/6``.
- LU with partial pivoting of m x n (``getrf``), k = min(m, n), K = max(m, n):
  ``k·(k·(K - k/3 - 1) + K)/2 + 2k/3`` multiplies and ``k·(k·(K - k/3) - K)/2 + k/6`` adds
  (square: ``2n³/3 - n²/2 + 5n/6``).
- A solve from an LU (``getrs``): ``2n² - n`` per right-hand side; from a Cholesky factor
  (``potrs``): ``2n²``; a triangular solve (``trsm``): ``n²`` per right-hand side (``n² - n``
  with a unit diagonal).
- QR of m x n (``geqrf``) and forming Q (``orgqr``) as the note gives them; ``mode="r"``
  forms no Q.

What torch runs: ``linalg.solve`` an LU and its solve; ``linalg.inv`` an LU and a solve
against the identity (n right-hand sides: ``8n³/3 - 3n²/2 + 5n/6``, where an inverse from the
LU in place, ``getri``, would be ``2n³`` to leading order); ``det`` the LU and the product of
its diagonal (n + 1 with the pivots' sign), ``slogdet`` the LU and, per diagonal value, a
sign, an absolute value, a log and two adds or multiplies (5n + 1). Eigenvalue and singular
value decompositions (``eigh``, ``eig``, ``svd``) iterate until they converge, a number of
sweeps that depends on the values: no count from shapes holds, and they are listed as
uncounted.
"""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch

from .opcall import OpCall, Rule
from .tensors import TensorMeta, flat_tensors, is_float, numel

__all__ = ["linalg_rules"]

aten = torch.ops.aten

_THIRD, _SIXTH, _HALF = sympy.Rational(1, 3), sympy.Rational(1, 6), sympy.Rational(1, 2)


def _flops(tensor: TensorMeta, multiplies: Any, adds: Any) -> Any:
    """Multiplies and adds in real FLOPs (complex: 6 and 2 each)."""
    if tensor.dtype.is_complex:
        return 6 * multiplies + 2 * adds
    return multiplies + adds


def _matrices(tensor: TensorMeta) -> Any:
    """The number of matrices in a batch of them."""
    return math.prod(tensor.shape[:-2])


def _per(solution: TensorMeta, n: Any) -> Any:
    """Right-hand sides of a solution of order n (its columns, or rows solving from the
    right), over the whole batch."""
    return sympy.sympify(numel(solution)) / n


def _potrf(n: Any) -> tuple[Any, Any]:
    return n * ((_SIXTH * n + _HALF) * n + _THIRD), n * (_SIXTH * n * n - _SIXTH)


def _getrf(m: Any, n: Any) -> tuple[Any, Any]:
    small, large = (n, n) if m == n else (min(m, n), max(m, n))
    multiplies = _HALF * small * (small * (large - _THIRD * small - 1) + large)
    adds = _HALF * small * (small * (large - _THIRD * small) - large)
    return multiplies + 2 * _THIRD * small, adds + _SIXTH * small


def _geqrf(m: Any, n: Any) -> tuple[Any, Any]:
    if m != n and m > n:  # (sizes may be symbols: equal ones are compared as expressions)
        inner = n * (_HALF - _THIRD * n + m)
        return n * (inner + m + sympy.Rational(23, 6)), n * (inner + 5 * _SIXTH)
    inner = m * (-_HALF - _THIRD * m + n)
    return m * (inner + 2 * n + sympy.Rational(23, 6)), m * (inner + n + 5 * _SIXTH)


def _orgqr(m: Any, n: Any, k: Any) -> tuple[Any, Any]:
    """Forming the m x n Q of k reflectors."""
    multiplies = k * (2 * m * n + 2 * n - 5 * _THIRD + k * (2 * _THIRD * k - (m + n) - 1))
    adds = k * (2 * m * n + n - m + _THIRD + k * (2 * _THIRD * k - (m + n)))
    return multiplies, adds


def _factorisation(count: Any) -> Rule:
    """A factorisation of each square matrix of the first input (``count(n)``)."""

    def rule(call: OpCall) -> Any:
        a = call.inputs[0]
        if not is_float(a):
            return 0
        return _matrices(a) * _flops(a, *count(a.shape[-1]))

    return rule


def _lu_factor(call: OpCall) -> Any:
    a = call.inputs[0]
    if not is_float(a):
        return 0
    return _matrices(a) * _flops(a, *_getrf(a.shape[-2], a.shape[-1]))


def _lu_solved(a: TensorMeta, solution: TensorMeta) -> Any:
    """Solves from an LU of order n: ``2n² - n`` per right-hand side."""
    n = a.shape[-1]
    return _per(solution, n) * _flops(a, n * n, n * n - n)


def _solve(call: OpCall) -> Any:
    """``linalg.solve``: the LU of A, then its solve for each right-hand side."""
    a = call.inputs[0]
    if not is_float(a):
        return 0
    result, lu = flat_tensors(call.out)[:2]
    n = a.shape[-1]
    return _matrices(lu) * _flops(a, *_getrf(n, n)) + _lu_solved(a, result)


def _lu_solve(call: OpCall) -> Any:
    lu = call.inputs[0]
    return _lu_solved(lu, call.output) if is_float(lu) else 0


def _inverse(call: OpCall) -> Any:
    """``linalg.inv``: the LU, then a solve against the identity (n right-hand sides)."""
    a = call.inputs[0]
    if not is_float(a):
        return 0
    n = a.shape[-1]
    return _matrices(a) * _flops(a, *_getrf(n, n)) + _lu_solved(a, call.output)


def _triangular(a: TensorMeta, solution: TensorMeta, unit: bool) -> Any:
    """Triangular solves (``trsm``): n(n+1)/2 multiplies, n(n-1)/2 adds per right-hand side
    (a unit diagonal: n(n-1)/2 multiplies)."""
    n = a.shape[-1]
    multiplies = _HALF * n * (n - 1 if unit else n + 1)
    return _per(solution, n) * _flops(a, multiplies, _HALF * n * (n - 1))


def _solve_triangular(call: OpCall) -> Any:
    a = call.inputs[0]  # (A, B, upper, left, unitriangular)
    if not is_float(a):
        return 0
    return _triangular(a, call.output, bool(call.arg(4, "unitriangular", False)))


def _triangular_solve(call: OpCall) -> Any:
    a = call.inputs[1]  # (B, A, upper, transpose, unitriangular)
    if not is_float(a):
        return 0
    return _triangular(a, call.output, bool(call.arg(4, "unitriangular", False)))


def _cholesky_solve(call: OpCall) -> Any:
    """Two triangular solves from the Cholesky factor (``potrs``): n(n+1) multiplies and
    n(n-1) adds per right-hand side."""
    factor = call.inputs[1]  # (B, L, upper)
    if not is_float(factor):
        return 0
    n = factor.shape[-1]
    return _per(call.output, n) * _flops(factor, n * (n + 1), n * (n - 1))


def _qr(call: OpCall) -> Any:
    a = call.inputs[0]
    if not is_float(a):
        return 0
    m, n = a.shape[-2], a.shape[-1]
    multiplies, adds = _geqrf(m, n)
    mode = call.arg(1, "mode", "reduced")
    if mode != "r":
        k = n if m == n else min(m, n)
        q_multiplies, q_adds = _orgqr(m, m if mode == "complete" else k, k)
        multiplies, adds = multiplies + q_multiplies, adds + q_adds
    return _matrices(a) * _flops(a, multiplies, adds)


def _householder(call: OpCall) -> Any:
    a = call.inputs[0]
    if not is_float(a):
        return 0
    return _matrices(a) * _flops(a, *_geqrf(a.shape[-2], a.shape[-1]))


def _householder_product(call: OpCall) -> Any:
    a, tau = call.inputs[0], call.inputs[1]
    if not is_float(a):
        return 0
    return _matrices(a) * _flops(a, *_orgqr(a.shape[-2], a.shape[-1], tau.shape[-1]))


def _determinant(per_diagonal: int) -> Rule:
    """The LU, then per diagonal value ``per_diagonal`` FLOPs, and the pivots' sign."""

    def rule(call: OpCall) -> Any:
        a = call.inputs[0]
        if not is_float(a):
            return 0
        n = a.shape[-1]
        return _matrices(a) * (_flops(a, *_getrf(n, n)) + per_diagonal * n + 1)

    return rule


def linalg_rules() -> dict[Any, Rule]:
    """The rules of this module, by the op each counts."""
    return {
        aten.linalg_cholesky_ex: _factorisation(_potrf),
        aten.cholesky: _factorisation(_potrf),
        aten.linalg_lu_factor_ex: _lu_factor,
        aten.linalg_lu: _lu_factor,
        aten._linalg_solve_ex: _solve,
        aten.linalg_lu_solve: _lu_solve,
        aten.linalg_inv_ex: _inverse,
        aten.linalg_solve_triangular: _solve_triangular,
        aten.triangular_solve: _triangular_solve,
        aten.cholesky_solve: _cholesky_solve,
        aten.linalg_qr: _qr,
        aten.geqrf: _householder,
        aten.linalg_householder_product: _householder_product,
        aten._linalg_det: _determinant(1),
        aten._linalg_slogdet: _determinant(5),
    }
