"""How the formula terms of a tensor's axes carry over to an op's output.

A term is the sympy expression an axis's size stands for in the current call's dim names
(``batch``, ``d_in``, ``b*s``). Broadcasting takes each output axis from an input axis of the
same size; a reshape multiplies the terms of merged axes and splits a product term along its
factors. Where a mapping is not clear the size itself, as a number, is the term.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy

from .recording import Node

__all__ = ["broadcast_terms", "reshaped_terms"]


def broadcast_terms(
    shape: Sequence[int], sources: Sequence[tuple[Sequence[int], Sequence[sympy.Expr]]]
) -> list[sympy.Expr]:
    rank = len(shape)
    terms: list[sympy.Expr] = []
    for axis, size in enumerate(shape):
        term: sympy.Expr = sympy.Integer(size)
        for src_shape, src_terms in sources:
            aligned = axis - (rank - len(src_shape))
            if aligned >= 0 and src_shape[aligned] == size:
                term = src_terms[aligned]
                break
        terms.append(term)
    return terms


def reshaped_terms(
    node: Node, terms: Sequence[sympy.Expr], shape: tuple[int, ...], out: tuple[int, ...]
) -> list[sympy.Expr] | None:
    """The terms of a reshape's output: merged axes multiply their terms, a split axis is
    divided along the factors of its term (``b*s`` into ``b`` and ``s``); None if unclear."""
    source = [(size, term) for size, term in zip(shape, terms, strict=True) if size != 1]
    result: list[sympy.Expr] = []
    i = 0
    j = 0
    while j < len(out):
        if out[j] == 1:
            result.append(sympy.Integer(1))
            j += 1
            continue
        if i >= len(source):
            return None
        size, term = source[i]
        if size == out[j]:
            result.append(term)
            i, j = i + 1, j + 1
        elif size < out[j]:  # merge source axes until their product is this output axis
            product, merged = 1, []
            while i < len(source) and product < out[j]:
                product *= source[i][0]
                merged.append(source[i][1])
                i += 1
            if product != out[j]:
                return None
            result.append(sympy.Mul(*merged))
            j += 1
        else:  # split one source axis over output axes
            parts, product = [], 1
            while j < len(out) and product < size:
                product *= out[j]
                parts.append(out[j])
                j += 1
            if product != size:
                return None
            result.extend(_split_term(node, term, parts))
            i += 1
    return result if i == len(source) else None


def _split_term(node: Node, term: sympy.Expr, sizes: list[int]) -> list[sympy.Expr]:
    """``b*s`` at sizes (2, 3) with b=2, s=3 gives (b, s); numbers where factors do not fit."""
    values = {sympy.Symbol(name): sympy.Integer(size) for name, size in node.dims.items()}
    factors = list(sympy.Mul.make_args(term))
    found: list[sympy.Expr] = []
    for size in sizes:
        group: list[sympy.Expr] = []
        value = 1
        while factors and value < size:
            factor = factors.pop(0)
            group.append(factor)
            numeric = factor.xreplace(values)
            if not numeric.is_Integer:
                return [sympy.Integer(s) for s in sizes]
            value *= int(numeric)
        if value != size:
            return [sympy.Integer(s) for s in sizes]
        found.append(sympy.Mul(*group))
    return found if not factors else [sympy.Integer(s) for s in sizes]
