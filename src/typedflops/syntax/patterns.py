"""einops patterns: the grammar of each side, and the rules of each op.

A side (``"b (h w) ..."``) is read with einops' own :class:`einops.parsing.ParsedExpression`;
the per-op rules are einops' (its transformation recipe, its einsum compaction, torch's
einsum and einops' ``pack``/``unpack`` checks), written once here and raised as a
:class:`~typedflops.syntax.Problem`. Everything here holds whatever the tensors' shapes;
:func:`check_rank` adds the one rule that needs a rank.

The unicode ellipsis ``…`` reads as einops reads it: in ``einsum`` it is ``...``; in
``rearrange``/``reduce``/``repeat`` it is ``...`` when the side also spells ``...``, and
otherwise one axis named ``…``.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

from einops import EinopsError
from einops.parsing import AnonymousAxis, ParsedExpression

from . import Problem
from .dims import with_ellipsis

__all__ = [
    "ELLIPSIS",
    "REDUCTIONS",
    "TRANSFORMS",
    "EinsumPattern",
    "Entry",
    "Group",
    "PackPattern",
    "Side",
    "TransformPattern",
    "check_operand_count",
    "check_rank",
    "check_reduction",
    "einsum_pattern",
    "pack_pattern",
    "transform_pattern",
]

#: The reductions einops knows by name.
REDUCTIONS = ("min", "max", "sum", "mean", "prod", "any", "all")
#: The ops whose pattern has one input side.
TRANSFORMS = ("rearrange", "reduce", "repeat")
#: Marks ``...`` among a side's entries (never a valid axis name).
ELLIPSIS = "..."
_UNICODE_ELLIPSIS = "\u2026"  # einops' own marker for "..." inside a parsed side


@dataclass(frozen=True)
class Group:
    """One axis of a side: a name, a parenthesised composition, or an anonymous size.

    ``members`` holds axis names, anonymous sizes (ints above 1) and :data:`ELLIPSIS`
    inside parentheses; a ``1`` contributes nothing, so ``()`` and ``1`` are empty groups.
    """

    members: tuple[str | int, ...]

    def __str__(self) -> str:
        spelled = " ".join(str(member) for member in self.members)
        return spelled if len(self.members) == 1 else f"({spelled})"


Entry: TypeAlias = Group | str  # a Group, or ELLIPSIS standing for any number of axes


@dataclass(frozen=True)
class Side:
    """One side of a pattern, e.g. ``b c (h w)``."""

    text: str
    entries: tuple[Entry, ...]

    @property
    def names(self) -> frozenset[str]:
        """Axis names on this side (the ellipsis and anonymous sizes excluded)."""
        return frozenset(
            member
            for entry in self.entries
            if isinstance(entry, Group)
            for member in entry.members
            if isinstance(member, str) and member != ELLIPSIS
        )

    @property
    def has_ellipsis(self) -> bool:
        """Whether ``...`` appears on this side, in or out of parentheses."""
        return any(
            entry == ELLIPSIS or (isinstance(entry, Group) and ELLIPSIS in entry.members)
            for entry in self.entries
        )

    @property
    def anonymous(self) -> tuple[int, ...]:
        """The anonymous sizes other than 1 on this side, in order."""
        return tuple(
            member
            for entry in self.entries
            if isinstance(entry, Group)
            for member in entry.members
            if isinstance(member, int)
        )

    def __str__(self) -> str:
        return " ".join(str(entry) for entry in self.entries)


def _parse_side(text: str, *, einsum: bool = False, duplicates: bool = False) -> Side:
    try:
        parsed = ParsedExpression(text, allow_underscore=einsum, allow_duplicates=duplicates)
    except EinopsError as exc:
        message = str(exc).splitlines()[0]
        if "," in text and not einsum:
            message += " (axes are separated with spaces, not commas)"
        raise Problem(f'in "{text.strip()}": {message}') from None
    entries: list[Entry] = []
    for item in parsed.composition:
        if isinstance(item, str):  # einops' ellipsis marker outside parentheses
            is_ellipsis = einsum or parsed.has_ellipsis
            entries.append(ELLIPSIS if is_ellipsis else Group((_UNICODE_ELLIPSIS,)))
            continue
        members: list[str | int] = []
        for axis in item:
            if isinstance(axis, AnonymousAxis):
                members.append(axis.value)
            elif axis == _UNICODE_ELLIPSIS and parsed.has_ellipsis and not einsum:
                members.append(ELLIPSIS)
            else:
                members.append(str(axis))
        entries.append(Group(tuple(members)))
    return Side(text, tuple(entries))


def _first(names: Iterable[str]) -> str:
    return sorted(names)[0]


# -- rearrange, reduce, repeat --------------------------------------------------------------


@dataclass(frozen=True)
class TransformPattern:
    """A ``rearrange``/``reduce``/``repeat`` pattern that einops accepts for ``operation``."""

    pattern: str
    operation: str
    left: Side
    right: Side


def check_reduction(reduction: str) -> None:
    """Raise :class:`Problem` unless ``reduction`` is a reduction einops knows by name.

    >>> check_reduction("meen")
    Traceback (most recent call last):
      ...
    typedflops.syntax.Problem: unknown reduction 'meen': use one of min, max, sum, mean, prod, any, all or a callable
    """  # noqa: E501
    if reduction not in REDUCTIONS:
        raise Problem(
            f"unknown reduction '{reduction}': use one of {', '.join(REDUCTIONS)} or a callable"
        )


@functools.lru_cache(maxsize=4096)
def transform_pattern(
    pattern: str, operation: str, axes_names: tuple[str, ...] = (), complete: bool = True
) -> TransformPattern:
    """Check a pattern of ``operation`` ("rearrange", "reduce" or "repeat") as einops does.

    ``axes_names`` are the names given lengths (``**axes_lengths``); ``complete`` is False
    when more may be given unseen (a ``**mapping`` in a call), which skips the rules that
    need every name. Raises :class:`Problem`.

    >>> transform_pattern("b (h w) -> b h w", "rearrange", ("h",)).right.names == {"b", "h", "w"}
    True
    >>> transform_pattern("(a d) h -> d a h", "rearrange")
    Traceback (most recent call last):
      ...
    typedflops.syntax.Problem: cannot infer the sizes of a, d: give all but one as keyword lengths
    """
    if pattern.count("->") != 1:
        raise Problem("the pattern needs exactly one '->'")
    left_text, right_text = pattern.split("->")
    left, right = _parse_side(left_text), _parse_side(right_text)
    if right.has_ellipsis and not left.has_ellipsis:
        raise Problem("'...' is on the right but not on the left", axis="...")
    if any(isinstance(entry, Group) and ELLIPSIS in entry.members for entry in left.entries):
        raise Problem("'...' inside parentheses on the left is not allowed", axis="...")
    if left.has_ellipsis and _UNICODE_ELLIPSIS in right.names:
        raise Problem("the ellipsis is '...' on the left but '…' on the right", axis="…")
    _check_sides(operation, left, right, axes_names, complete)
    for name in axes_names:
        if not ParsedExpression.check_axis_name(name):
            raise Problem(f"'{name}' is not a valid axis name", axis=name)
        if name not in left.names and name not in right.names:
            raise Problem(f"axis '{name}' is given a length but is not in the pattern", axis=name)
    if complete:
        for entry in left.entries:
            if isinstance(entry, Group):
                unknown = [m for m in entry.members if isinstance(m, str) and m not in axes_names]
                if len(unknown) > 1:
                    raise Problem(
                        f"cannot infer the sizes of {', '.join(unknown)}: give all but one "
                        "as keyword lengths",
                        axis=unknown[0],
                    )
    return TransformPattern(pattern, operation, left, right)


def _identifiers(side: Side) -> set[str]:
    return set(with_ellipsis(side.names, side.has_ellipsis, ELLIPSIS))


def _check_sides(
    operation: str, left: Side, right: Side, axes_names: tuple[str, ...], complete: bool
) -> None:
    left_ids, right_ids = _identifiers(left), _identifiers(right)
    if operation == "rearrange":
        if left.anonymous or right.anonymous:
            raise Problem("numbered axes other than 1 are not allowed in rearrange")
        only = left_ids ^ right_ids
        if only:
            axis = _first(only)
            raise Problem(
                f"axis '{axis}' is on one side only (rearrange keeps every axis)", axis=axis
            )
    elif operation == "repeat":
        extra = left_ids - right_ids
        if extra:
            axis = _first(extra)
            raise Problem(f"axis '{axis}' is on the left but not on the right of repeat", axis=axis)
        if left.anonymous:
            raise Problem("numbered axes on the left of repeat are not allowed")
        unsized = right_ids - left_ids - set(axes_names) - {ELLIPSIS}
        if unsized and complete:
            axis = _first(unsized)
            raise Problem(f"new axis '{axis}' needs a length, e.g. {axis}=3", axis=axis)
    elif operation == "reduce":
        extra = right_ids - left_ids
        if extra or right.anonymous:
            axis = _first(extra) if extra else str(right.anonymous[0])
            raise Problem(f"axis '{axis}' is on the right but not on the left of reduce", axis=axis)
    else:
        raise ValueError(f"not a transform: {operation!r}")


def check_rank(pattern: TransformPattern, ndim: int) -> None:
    """Raise :class:`Problem` unless a tensor of rank ``ndim`` fits the left side."""
    count = len(pattern.left.entries)
    if pattern.left.has_ellipsis:
        if ndim < count - 1:
            raise Problem(f"the input needs at least {count - 1} dimensions but has {ndim}")
    elif ndim != count:
        raise Problem(f"the input needs {count} dimensions but has {ndim}")


# -- einsum ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EinsumPattern:
    """An einsum pattern einops accepts: each operand's axes and the output's, with
    :data:`ELLIPSIS` for ``...``, and ``equation``, the torch.einsum equation einops builds
    (one letter per axis in order of first appearance)."""

    pattern: str
    operands: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]
    equation: str

    @property
    def has_ellipsis(self) -> bool:
        """Whether some operand has ``...``."""
        return any(ELLIPSIS in axes for axes in self.operands)


def _einsum_axes(side: Side, where: str) -> tuple[str, ...]:
    axes: list[str] = []
    for entry in side.entries:
        if entry == ELLIPSIS:
            if ELLIPSIS in axes:
                raise Problem(f"'...' appears twice in {where}", axis="...")
            axes.append(ELLIPSIS)
            continue
        assert isinstance(entry, Group)
        if not entry.members:
            raise Problem("singleton axes '()' or '1' are not supported in einsum")
        if len(entry.members) > 1:
            raise Problem(
                "composite axes such as '(h d)' are not supported in einsum; rearrange first",
                axis=str(entry),
            )
        axis = entry.members[0]
        if isinstance(axis, int):
            raise Problem("numbered axes are not supported in einsum", axis=str(axis))
        axes.append(axis)
    return tuple(axes)


@functools.lru_cache(maxsize=4096)
def einsum_pattern(pattern: str) -> EinsumPattern:
    """Check an einops einsum pattern (``"b i, i o -> b o"``) as einops and torch do.

    >>> einsum_pattern("b i, i o -> b o").equation
    'ab,bc->ac'
    >>> einsum_pattern("b i -> b o")
    Traceback (most recent call last):
      ...
    typedflops.syntax.Problem: axis 'o' is on the right but in no operand
    """
    if "->" not in pattern:
        raise Problem("the pattern needs '->' followed by the output axes")
    if pattern.count("->") != 1:
        raise Problem("the pattern has more than one '->'")
    left_text, right_text = pattern.split("->")
    lefts = [_parse_side(text, einsum=True, duplicates=True) for text in left_text.split(",")]
    right = _parse_side(right_text, einsum=True)
    operands = tuple(_einsum_axes(side, f"operand {index + 1}") for index, side in enumerate(lefts))
    output = _einsum_axes(right, "the output")
    letters: dict[str, str] = {}
    for axis in (a for axes in operands for a in axes if a != ELLIPSIS):
        if axis not in letters:
            if len(letters) == len(string.ascii_letters):
                raise Problem(f"too many axes in einsum (at most {len(string.ascii_letters)})")
            letters[axis] = string.ascii_letters[len(letters)]
    seen: set[str] = set()
    for axis in output:
        if axis != ELLIPSIS and axis not in letters:
            raise Problem(f"axis '{axis}' is on the right but in no operand", axis=axis)
        if axis in seen:
            raise Problem(f"axis '{axis}' appears twice on the right", axis=axis)
        seen.add(axis)

    def compact(axes: tuple[str, ...]) -> str:
        return "".join("..." if axis == ELLIPSIS else letters[axis] for axis in axes)

    equation = ",".join(compact(axes) for axes in operands) + "->" + compact(output)
    return EinsumPattern(pattern, operands, output, equation)


def check_operand_count(pattern: EinsumPattern, count: int) -> None:
    """Raise :class:`Problem` unless the pattern names ``count`` operands."""
    named = len(pattern.operands)
    if named != count:
        raise Problem(
            f"the pattern has {named} operand{'s' * (named != 1)} "
            f"but {count} tensor{'s were' if count != 1 else ' was'} given"
        )


# -- pack, unpack ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PackPattern:
    """A ``pack``/``unpack`` pattern such as ``"b * d"``: the axes before and after ``*``."""

    pattern: str
    before: tuple[str, ...]
    after: tuple[str, ...]

    @property
    def min_rank(self) -> int:
        """The fewest axes a packed tensor can have (``*`` may match none)."""
        return len(self.before) + len(self.after)


@functools.lru_cache(maxsize=1024)
def pack_pattern(pattern: str) -> PackPattern:
    """Check a ``pack``/``unpack`` pattern as einops does.

    >>> pack_pattern("b * d").before
    ('b',)
    >>> pack_pattern("b d")
    Traceback (most recent call last):
      ...
    typedflops.syntax.Problem: the pattern needs one '*' where the packed axes go
    """
    axes = pattern.split()
    for index, axis in enumerate(axes):
        if axis in axes[:index]:
            raise Problem(f"axis '{axis}' appears twice", axis=axis)
    if "*" not in axes:
        raise Problem("the pattern needs one '*' where the packed axes go")
    for axis in axes:
        if axis != "*" and not ParsedExpression.check_axis_name_return_reason(axis)[0]:
            raise Problem(f"'{axis}' is not a valid axis name", axis=axis)
    star = axes.index("*")
    return PackPattern(pattern, tuple(axes[:star]), tuple(axes[star + 1 :]))
