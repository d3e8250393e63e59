"""Hypothesis strategies for the grammar parity tests: einops patterns (mostly valid, then
mutated the ways people get them wrong), the tensors that fit them, and jaxtyping dim
strings."""

from __future__ import annotations

import math
from dataclasses import dataclass

from einops.parsing import AnonymousAxis, ParsedExpression
from hypothesis import strategies as st

#: The size every axis name stands for (distinct primes where it matters, so a wrong
#: split of a composite axis is never hidden by a coincidence).
SIZES = {"a": 2, "b": 3, "c": 5, "d": 7, "h": 2, "w": 3, "k": 2, "x1": 2, "axis": 2, "_": 2}
NAMES = ("a", "b", "c", "d", "h", "w", "x1")
STRAY = (",", ".", "(", ")", "()", "_a", "a_", "0", "1", "2", "\u2026", "...", "->", "*", "a-b")
ELLIPSIS_AXES = (3, 2)


@dataclass(frozen=True)
class TransformCase:
    """A rearrange/reduce/repeat call: op, pattern and keyword axis lengths."""

    op: str
    pattern: str
    lengths: tuple[tuple[str, int], ...]


def _side(groups: list[list[str]], ellipsis_at: int | None) -> list[str]:
    tokens = [g[0] if len(g) == 1 else "(" + " ".join(g) + ")" for g in groups]
    if ellipsis_at is not None:
        tokens.insert(min(ellipsis_at, len(tokens)), "...")
    return tokens


@st.composite
def _groups(draw: st.DrawFn, names: list[str]) -> list[list[str]]:
    groups: list[list[str]] = []
    for name in names:
        if groups and draw(st.integers(0, 4)) == 0:
            groups[-1].append(name)
        else:
            groups.append([name])
    return groups


@st.composite
def _mutated(draw: st.DrawFn, tokens: list[str]) -> list[str]:
    tokens = list(tokens)
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.integers(0, 4))
        position = draw(st.integers(0, len(tokens)))
        if kind == 0:
            tokens.insert(position, draw(st.sampled_from(STRAY)))
        elif kind == 1 and tokens:
            del tokens[min(position, len(tokens) - 1)]
        elif kind == 2 and tokens:
            tokens.insert(position, tokens[min(position, len(tokens) - 1)])
        elif kind == 3:
            tokens.insert(position, draw(st.sampled_from((*NAMES, "2", "3"))))
        else:
            tokens = ["\u2026" if t == "..." else "(...)" if t == "\u2026" else t for t in tokens]
    return tokens


@st.composite
def transform_cases(draw: st.DrawFn) -> TransformCase:
    """A pattern for rearrange, reduce or repeat, valid or nearly so, and axis lengths."""
    op = draw(st.sampled_from(("rearrange", "reduce", "repeat")))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=0, max_size=4, unique=True))
    with_ellipsis = draw(st.booleans())
    left_groups = draw(_groups(names))
    if draw(st.integers(0, 5)) == 0:
        left_groups.append([draw(st.sampled_from(("1", "2", "()")))])
    right_names = list(draw(st.permutations(names)))
    if op == "reduce" and right_names:
        right_names = right_names[: draw(st.integers(0, len(right_names)))]
    extra = [n for n in NAMES if n not in names][: draw(st.integers(0, 2))]
    if op == "repeat":
        right_names += extra
    right_groups = draw(_groups(right_names))
    if draw(st.integers(0, 5)) == 0:
        right_groups.append([draw(st.sampled_from(("1", "3", "()")))])
    left_at = draw(st.integers(0, len(left_groups))) if with_ellipsis else None
    right_at = None
    if with_ellipsis and (op != "reduce" or draw(st.booleans())):
        right_at = draw(st.integers(0, len(right_groups)))
    left = _side(left_groups, left_at)
    right = _side(right_groups, right_at)
    if draw(st.integers(0, 2)) == 0:
        left, right = draw(_mutated(left)), draw(_mutated(right))
    arrow = draw(st.sampled_from((" -> ",) * 8 + ("->", " ", " -> -> ")))
    pattern = " ".join(left) + arrow + " ".join(right)
    pool: list[str] = names + extra
    if not pool or draw(st.integers(0, 4)) == 0:
        pool = [*NAMES, "k"]
    given = draw(st.lists(st.sampled_from(pool), max_size=3, unique=True))
    if op == "repeat" and draw(st.booleans()):
        given = list(dict.fromkeys(given + extra))
    return TransformCase(op, pattern, tuple((name, SIZES[name]) for name in given))


def shape_for(left: str, *, einsum: bool = False) -> tuple[int, ...]:
    """A shape that fits one pattern side as einops parses it (every name at its size in
    :data:`SIZES`, ``...`` as two axes), or ``(2,)`` when einops cannot parse it."""
    try:
        parsed = ParsedExpression(left, allow_underscore=einsum, allow_duplicates=einsum)
    except Exception:
        return (2,)
    shape: list[int] = []
    for item in parsed.composition:
        if isinstance(item, str):  # einops' ellipsis marker (or its one-axis "…")
            ellipsis = parsed.has_ellipsis or einsum
            shape.extend(ELLIPSIS_AXES if ellipsis else (SIZES["_"],))
        else:
            sizes = [a.value if isinstance(a, AnonymousAxis) else SIZES.get(a, 2) for a in item]
            shape.append(math.prod(sizes))
    return tuple(shape)


@st.composite
def einsum_cases(draw: st.DrawFn) -> tuple[str, int]:
    """An einsum pattern (valid or nearly so) and a number of operands."""
    count = draw(st.integers(1, 3))
    operands = []
    pool = ("a", "b", "c", "d", "_")
    for _ in range(count):
        axes = draw(st.lists(st.sampled_from(pool), max_size=3))
        if draw(st.integers(0, 3)) == 0:
            axes.insert(draw(st.integers(0, len(axes))), "...")
        operands.append(axes)
    seen = list(dict.fromkeys(a for axes in operands for a in axes if a != "..."))
    output = draw(st.lists(st.sampled_from(seen), unique=True)) if seen else []
    if any("..." in axes for axes in operands) and draw(st.booleans()):
        output.insert(0, "...")
    tokens = [" ".join(axes) for axes in operands]
    if draw(st.integers(0, 2)) == 0:
        tokens = draw(_mutated(tokens))
        output = draw(_mutated(output))
    arrow = draw(st.sampled_from((" -> ",) * 8 + ("->", " ", " -> -> ")))
    pattern = ", ".join(tokens) + arrow + " ".join(output)
    given = count if draw(st.integers(0, 5)) else draw(st.integers(1, 3))
    return pattern, given


@st.composite
def pack_patterns(draw: st.DrawFn) -> str:
    """A pack/unpack pattern such as ``"b * d"``, valid or nearly so."""
    names = draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True))
    names.insert(draw(st.integers(0, len(names))), "*")
    return " ".join(draw(_mutated(names)) if draw(st.booleans()) else names)


DIM_ITEMS = (
    "batch",
    "d_in",
    "3",
    "1_000",
    "+2",
    "rows=3",
    "n=k",
    "n+1",
    "2*n",
    "n//2",
    "min(a,b)",
    "0x10",
    "*batch",
    "...",
    "#b",
    "#3",
    "_",
    "_k",
    "*_",
    "?t",
    "*?t",
    "-3",
    "=",
    "*",
    "#",
    "b#",
    "##b",
    "**b",
    "__b",
    "_#b",
    "_4",
    "*4",
    "_n+1",
    "*n+1",
    "a,b",
    "a..b",
    "....",
    "x=y=z",
    "9**9**9",
    "β",
)


@st.composite
def dim_strings(draw: st.DrawFn) -> str:
    """A jaxtyping dim string made of common, unusual and wrong items."""
    items = draw(st.lists(st.sampled_from(DIM_ITEMS), max_size=4))
    return " ".join(items)
