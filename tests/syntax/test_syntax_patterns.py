"""The grammar core's einops rules against einops itself: the same verdict on every
generated pattern (its parser, its recipe and its ops are the oracle), and typedflops' ops
raising the core's reason."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import einops
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from syntax_strategies import (
    SIZES,
    TransformCase,
    einsum_cases,
    pack_patterns,
    shape_for,
    transform_cases,
)

import typedflops
from typedflops import PatternError
from typedflops.syntax import Problem
from typedflops.syntax.patterns import (
    REDUCTIONS,
    check_operand_count,
    check_rank,
    check_reduction,
    einsum_pattern,
    pack_pattern,
    transform_pattern,
)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::FutureWarning")

# einops' own internals, read as the oracle (they are not in its public types).
EINOPS_INTERNALS = vars(importlib.import_module("einops.einops"))
prepare_recipe = EINOPS_INTERNALS["_prepare_transformation_recipe"]


def _left(pattern: str) -> str:
    return pattern.split("->")[0]


def einops_accepts(case: TransformCase) -> bool:
    """Whether einops runs the call on a tensor that fits the pattern's left side."""
    x = np.zeros(shape_for(_left(case.pattern)))
    lengths = dict(case.lengths)
    try:
        if case.op == "reduce":
            einops.reduce(x, case.pattern, "sum", **lengths)
        else:
            getattr(einops, case.op)(x, case.pattern, **lengths)
    except Exception:
        return False
    return True


def core_problem(case: TransformCase) -> Problem | None:
    """The core's reason to reject the call, or None."""
    try:
        parsed = transform_pattern(case.pattern, case.op, tuple(n for n, _ in case.lengths))
        check_rank(parsed, len(shape_for(_left(case.pattern))))
    except Problem as problem:
        return problem
    return None


@settings(max_examples=600, deadline=None)
@given(transform_cases())
def test_transform_verdicts_match_einops(case: TransformCase) -> None:
    assert (core_problem(case) is None) == einops_accepts(case), case


@settings(max_examples=300, deadline=None)
@given(transform_cases())
def test_what_the_core_accepts_einops_recipe_accepts(case: TransformCase) -> None:
    if core_problem(case) is not None:
        return
    operation = "sum" if case.op == "reduce" else case.op
    ndim = len(shape_for(_left(case.pattern)))
    names = tuple(n for n, _ in case.lengths)
    prepare_recipe(case.pattern, operation, names, ndim)  # does not raise


@settings(max_examples=300, deadline=None)
@given(transform_cases())
def test_typedflops_ops_raise_the_core_reason(case: TransformCase) -> None:
    problem = core_problem(case)
    x = torch.zeros(shape_for(_left(case.pattern)))
    op = getattr(typedflops, case.op)
    args: tuple[Any, ...] = ("sum",) if case.op == "reduce" else ()
    if problem is None:
        ours = op(x, case.pattern, *args, **dict(case.lengths))
        theirs = getattr(einops, case.op)(x, case.pattern, *args, **dict(case.lengths))
        assert torch.equal(ours, theirs)
        return
    with pytest.raises(PatternError) as info:
        op(x, case.pattern, *args, **dict(case.lengths))
    assert str(info.value).splitlines()[0] == f'{case.op} "{case.pattern}": {problem.reason}'


@pytest.mark.parametrize(
    ("op", "pattern", "lengths", "shape", "reason"),
    [
        ("rearrange", "(a d) h -> d a h", {}, (6, 2), "cannot infer the sizes of a, d"),
        ("rearrange", "(a d) h -> d a h", {"a": 2}, (6, 2), None),
        ("rearrange", "... -> 1", {}, (2, 3), "axis '...' is on one side only"),
        ("reduce", "... -> 1", {}, (2, 3), None),
        ("repeat", "... -> ... 2", {}, (2, 3), None),
        ("rearrange", "\u2026 b -> b \u2026", {}, (2, 3), None),  # "…" is one axis here
        ("rearrange", "\u2026 b -> b \u2026", {}, (2, 3, 4), "needs 2 dimensions but has 3"),
        ("rearrange", "... -> \u2026", {}, (2, 3), "'...' on the left but '\u2026' on the right"),
        ("rearrange", "b c -> c b", {"h": 2}, (2, 3), "axis 'h' is given a length but is not"),
        ("repeat", "a -> a b", {}, (2,), "new axis 'b' needs a length"),
        ("rearrange", "a b", {}, (2, 3), "the pattern needs exactly one '->'"),
        ("rearrange", "a, b -> b a", {}, (2, 3), "not commas"),
    ],
)
def test_named_cases(
    op: str, pattern: str, lengths: dict[str, int], shape: tuple[int, ...], reason: str | None
) -> None:
    x = torch.arange(float(np.prod(shape))).reshape(shape)
    args: tuple[Any, ...] = ("sum",) if op == "reduce" else ()
    try:
        expected = getattr(einops, op)(x, pattern, *args, **lengths)
    except Exception:
        expected = None
    if reason is None:
        assert expected is not None
        assert torch.equal(getattr(typedflops, op)(x, pattern, *args, **lengths), expected)
        return
    assert expected is None
    with pytest.raises(PatternError, match=None) as info:
        getattr(typedflops, op)(x, pattern, *args, **lengths)
    assert reason in str(info.value).splitlines()[0]


def test_reductions_are_einops_own() -> None:
    assert EINOPS_INTERNALS["_reductions"] == REDUCTIONS
    x = np.ones((2, 3))
    for name in REDUCTIONS:
        check_reduction(name)
        einops.reduce(x, "a b -> a", name)
    with pytest.raises(Problem, match="unknown reduction 'meen'"):
        check_reduction("meen")
    with pytest.raises(einops.EinopsError, match="Unknown reduction"):
        einops.reduce(x, "a b -> a", "meen")  # type: ignore[pattern]


def einsum_problem(pattern: str, count: int) -> Problem | None:
    try:
        check_operand_count(einsum_pattern(pattern), count)
    except Problem as problem:
        return problem
    return None


def _einsum_operands(pattern: str, count: int) -> list[torch.Tensor]:
    texts = _left(pattern).split(",")
    return [
        torch.zeros(shape_for(texts[i] if i < len(texts) else "a", einsum=True))
        for i in range(count)
    ]


@settings(max_examples=600, deadline=None)
@given(einsum_cases())
def test_einsum_verdicts_match_einops(case: tuple[str, int]) -> None:
    pattern, count = case
    operands = _einsum_operands(pattern, count)
    try:
        expected = einops.einsum(*operands, pattern)
    except Exception:
        expected = None
    problem = einsum_problem(pattern, count)
    assert (problem is None) == (expected is not None), (pattern, count, problem)
    if problem is None:
        assert expected is not None
        assert torch.equal(typedflops.einsum(*operands, pattern), expected)
    else:
        with pytest.raises(PatternError) as info:
            typedflops.einsum(*operands, pattern)
        assert str(info.value).splitlines()[0] == f'einsum "{pattern}": {problem.reason}'


def test_einsum_equation_is_einops_own() -> None:
    assert einsum_pattern("b i, i o -> b o").equation == "ab,bc->ac"
    assert einsum_pattern("\u2026 i, i o -> \u2026 o").equation == "...a,ab->...b"
    assert einsum_pattern("a b -> ...").equation == "ab->..."  # torch sums it all


@settings(max_examples=300, deadline=None)
@given(pack_patterns())
def test_pack_verdicts_match_einops(pattern: str) -> None:
    rank = len([t for t in pattern.split() if t != "*"]) + 1
    tensors = [np.zeros((2,) * rank), np.zeros((2,) * (rank + 1))]
    try:
        packed, shapes = einops.pack(tensors, pattern)
        einops.unpack(packed, shapes, pattern)
        accepted = True
    except Exception:
        accepted = False
    try:
        parsed = pack_pattern(pattern)
    except Problem:
        assert not accepted, pattern
        return
    assert accepted, pattern
    assert parsed.min_rank == rank - 1


def test_axis_sizes_in_strategies_are_distinct_primes_where_composed() -> None:
    # The parity tests rely on a wrong split never matching by coincidence.
    assert len({SIZES[n] for n in ("b", "c", "d")}) == 3


def test_keyword_axis_names_warn_as_einops_does() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        transform_pattern("for b -> b for", "rearrange")
    assert any("keywords" in str(w.message) for w in caught)
