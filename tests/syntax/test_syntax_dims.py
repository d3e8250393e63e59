"""The grammar core's dim strings against jaxtyping's own parse: where jaxtyping rejects a
dim string the core does too; where both accept, every item reads the same. The core
rejects more only where typedflops cannot check what jaxtyping would accept."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from jaxtyping import Float
from syntax_strategies import dim_strings

from typedflops.syntax import Problem
from typedflops.syntax.dims import Dim, DimKind, parse_dims

# What the core rejects on purpose, though jaxtyping's parse accepts it.
STRICTER = (
    "'?' dims depend on a location in a PyTree",  # allowed only inside PyTree annotations
    "a size cannot be negative",
    "names no dim",  # "*" or "=" alone
    "symbolic axis",  # outside names, integers, + - * / // ** and parentheses
)


def jaxtyping_dims(dim_str: str) -> tuple[Any, ...] | None:
    """jaxtyping's parsed items, or None where it raises."""
    try:
        hint: Any = Float[torch.Tensor, dim_str]
    except Exception:
        return None
    return tuple(hint.dims)


def describe(item: Any) -> tuple[DimKind, str | None, int | None, bool]:
    """(kind, name, size, broadcastable) of one of jaxtyping's parsed items."""
    kind_of = {
        "_NamedDim": DimKind.NAMED,
        "_NamedVariadicDim": DimKind.VARIADIC,
        "_FixedDim": DimKind.FIXED,
        "_SymbolicDim": DimKind.SYMBOLIC,
        "_AnonymousDim": DimKind.ANONYMOUS,
        "_AnonymousVariadicDim": DimKind.ANONYMOUS_VARIADIC,
    }
    kind = kind_of[type(item).__name__]
    label = getattr(item, "name", None)
    return kind, label, getattr(item, "size", None), bool(getattr(item, "broadcastable", False))


def core_describe(dim: Dim) -> tuple[DimKind, str | None, int | None, bool]:
    return dim.kind, dim.name, dim.size, dim.broadcastable


def test_anonymous_items_are_told_apart() -> None:
    items = jaxtyping_dims("_ ...")
    assert items is not None
    assert [describe(i)[0] for i in items] == [DimKind.ANONYMOUS, DimKind.ANONYMOUS_VARIADIC]


@settings(max_examples=800, deadline=None)
@given(dim_strings())
def test_dim_strings_read_as_jaxtyping_reads_them(dim_str: str) -> None:
    theirs = jaxtyping_dims(dim_str)
    try:
        ours = parse_dims(dim_str)
    except Problem as problem:
        assert theirs is None or any(s in problem.reason for s in STRICTER), (dim_str, problem)
        return
    assert theirs is not None, dim_str
    assert len(ours) == len(theirs)
    for mine, item in zip(ours, theirs, strict=True):
        if mine.kind is DimKind.SYMBOLIC:
            assert describe(item)[0] is DimKind.SYMBOLIC
            assert mine.formula is not None and mine.formula.text == item.elem
            assert mine.broadcastable == item.broadcastable
        else:
            assert core_describe(mine) == describe(item), (dim_str, mine, item)


@pytest.mark.parametrize(
    ("dim_str", "reason"),
    [
        ("b ?t", "'?t': '?' dims depend on a location in a PyTree"),
        ("n -3", "'-3': a size cannot be negative"),
        ("9**9**9", "symbolic axis '9**9**9': exponents are integers from 0 to 64"),
        ("n**n**n", "symbolic axis 'n**n**n': exponents are integers from 0 to 64, not 'n'"),
        ("a/0", "symbolic axis 'a/0': division by zero"),
        ("min(a,b)", "symbolic axis 'min(a,b)': function calls such as 'min(a,b)'"),
        ("a, b", "axes are separated with spaces, not commas"),
        ("*a *b", "'*name' or '...' may be used only once"),
    ],
)
def test_rejected_with_a_reason(dim_str: str, reason: str) -> None:
    with pytest.raises(Problem) as info:
        parse_dims(dim_str)
    assert info.value.reason.startswith(reason)


def test_python_literal_sizes_read_as_jaxtyping_reads_them() -> None:
    # jaxtyping reads a fixed size with int(): underscores and a sign are fine, and a hex
    # literal is a symbolic axis (whose value is 16).
    assert [d.size for d in parse_dims("1_000 +2 rows=3")] == [1000, 2, 3]
    (hex_axis,) = parse_dims("0x10")
    assert hex_axis.kind is DimKind.SYMBOLIC and hex_axis.formula is not None
    assert hex_axis.formula.constant == 16
