"""Dim strings, einops patterns and ``flops=`` formulas, parsed without torch or jaxtyping.

The mypy plugin runs inside the type checker, so this module imports nothing heavy: it
re-implements the small grammars it needs (jaxtyping's dim strings, einops' pattern
language) and returns plain frozen values that the hooks compare.

A tensor's dims are a tuple of:

- :class:`Axis` -- one axis of known symbolic size, a product of names times an integer
  (``batch``, ``3``, ``c*h*w``, ``2*d``);
- :class:`Variadic` -- any number of axes (``*batch``, or ``...`` when anonymous);
- :data:`UNKNOWN` -- one axis whose size the plugin cannot name (``_``, ``#b``, ``n+1``).

Everything unknown is gradual: it matches anything and never causes a diagnostic.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True)
class Axis:
    """One axis whose size is ``size`` times the product of the dims named in ``factors``.

    >>> Axis(("c", "h", "w"))
    Axis(factors=('c', 'h', 'w'), size=1)
    >>> str(Axis(("d",), 2)), str(Axis((), 3))
    ('2*d', '3')
    """

    factors: tuple[str, ...] = ()
    size: int = 1

    def __str__(self) -> str:
        parts = [str(self.size)] if self.size != 1 or not self.factors else []
        return "*".join(parts + list(self.factors))

    def times(self, other: Axis) -> Axis:
        """The axis whose size is the product of both sizes (names kept sorted)."""
        return Axis(tuple(sorted(self.factors + other.factors)), self.size * other.size)

    @property
    def is_fixed(self) -> bool:
        """True when the size is a plain integer."""
        return not self.factors


@dataclass(frozen=True)
class Variadic:
    """Zero or more axes: ``*name``, or ``...`` when ``name`` is None."""

    name: str | None = None

    def __str__(self) -> str:
        return f"*{self.name}" if self.name else "..."


@dataclass(frozen=True)
class Unknown:
    """One axis of a size the plugin cannot name; it matches every other dim."""

    def __str__(self) -> str:
        return "_"


UNKNOWN = Unknown()
Dim: TypeAlias = Axis | Variadic | Unknown
Dims: TypeAlias = tuple[Dim, ...]

_PRODUCT = re.compile(r"^(?:[A-Za-z_]\w*|\d+)(?:\*(?:[A-Za-z_]\w*|\d+))*$")


def _parse_product(text: str) -> Axis | None:
    """``c*h*w`` or ``2*d`` as an :class:`Axis`; None for any other expression."""
    if not _PRODUCT.match(text):
        return None
    axis = Axis()
    for factor in text.split("*"):
        axis = axis.times(Axis((), int(factor)) if factor.isdecimal() else Axis((factor,)))
    return axis


def _parse_dim(token: str) -> Dim | None:
    """One jaxtyping dim token; None where jaxtyping itself would reject it."""
    if token == "...":
        return Variadic(None)
    variadic = broadcastable = anonymous = False
    while token:
        # The same modifier loop as jaxtyping's `_make_array_cached`.
        if token[0] == "*" and not variadic:
            variadic, token = True, token[1:]
        elif token[0] == "#" and not broadcastable:
            broadcastable, token = True, token[1:]
        elif token[0] == "_" and not anonymous:
            anonymous, token = True, token[1:]
        elif token[0] == "?":
            return Variadic(None) if variadic else UNKNOWN
        elif token.count("=") == 1:
            token = token.split("=")[1]
        else:
            break
    if variadic:
        if token.isdecimal():
            return None
        named = token.isidentifier() and not anonymous and not broadcastable
        return Variadic(token if named else None)
    if anonymous or broadcastable or not token:
        return UNKNOWN
    if token.isidentifier():
        return Axis((token,))
    if token.isdecimal():
        return Axis((), int(token))
    return _parse_product(token) or UNKNOWN


@functools.lru_cache(maxsize=4096)
def parse_dims(dim_str: str) -> Dims | None:
    """Parse a jaxtyping dim string; None where jaxtyping would raise (then nothing is checked).

    >>> [str(d) for d in parse_dims("*batch d_in c*h*w _ 3")]
    ['*batch', 'd_in', 'c*h*w', '_', '3']
    >>> parse_dims("a, b") is None
    True
    """
    dims: list[Dim] = []
    for token in dim_str.split():
        if "," in token and "(" not in token:
            return None
        dim = _parse_dim(token)
        if dim is None:
            return None
        dims.append(dim)
    if sum(isinstance(dim, Variadic) for dim in dims) > 1:
        return None
    return tuple(dims)


def format_dims(dims: Dims) -> str:
    """The jaxtyping spelling of ``dims``; ``parse_dims(format_dims(d)) == d``."""
    return " ".join(str(dim) for dim in dims)


def named_dims(dims: Dims) -> set[str]:
    """Every dim name in ``dims`` (variadic names and product factors included)."""
    names: set[str] = set()
    for dim in dims:
        if isinstance(dim, Axis):
            names.update(dim.factors)
        elif isinstance(dim, Variadic) and dim.name:
            names.add(dim.name)
    return names


# --------------------------------------------------------------------------- einops patterns

ELLIPSIS = "..."


class PatternSyntaxError(ValueError):
    """A pattern einops would reject whatever the tensors; the message is one short reason."""


@dataclass(frozen=True)
class Group:
    """One axis of a pattern side: a name, a parenthesised composition, or an anonymous size.

    ``members`` holds axis names, integers (anonymous sizes) and :data:`ELLIPSIS` inside
    parentheses; a ``1`` contributes nothing, so ``()`` and ``1`` are empty groups.
    """

    members: tuple[str | int, ...]


Entry: TypeAlias = Group | str  # a Group, or ELLIPSIS standing for any number of axes


@dataclass(frozen=True)
class Side:
    """One side of a pattern, e.g. ``b c (h w)``."""

    entries: tuple[Entry, ...]

    @property
    def names(self) -> set[str]:
        """Axis names on this side (ellipsis excluded)."""
        return {
            member
            for entry in self.entries
            if isinstance(entry, Group)
            for member in entry.members
            if isinstance(member, str) and member != ELLIPSIS
        }

    @property
    def has_ellipsis(self) -> bool:
        """Whether ``...`` appears on this side, in or out of parentheses."""
        return any(
            entry == ELLIPSIS or (isinstance(entry, Group) and ELLIPSIS in entry.members)
            for entry in self.entries
        )


def _check_name(name: str, *, allow_underscore: bool) -> None:
    if not name.isidentifier():
        raise PatternSyntaxError(f'"{name}" is not a valid axis name')
    if (name.startswith("_") or name.endswith("_")) and not (allow_underscore and name == "_"):
        raise PatternSyntaxError(f'axis name "{name}" should not start or end with "_"')


def _parse_side(text: str, *, einsum: bool = False, duplicates: bool = False) -> Side:
    """Parse one side with einops' rules (``ParsedExpression``)."""
    if "." in text:
        if text.count("...") != 1 or text.count(".") != 3:
            raise PatternSyntaxError("dots are only allowed as one ellipsis (...) per side")
        text = text.replace("...", " \0 ")
    entries: list[Entry] = []
    seen: set[str] = set()
    group: list[str | int] | None = None
    for token in re.findall(r"\(|\)|[^\s()]+", text):
        if token == "(":
            if group is not None:
                raise PatternSyntaxError("brackets inside brackets are not allowed")
            group = []
            continue
        if token == ")":
            if group is None:
                raise PatternSyntaxError("brackets are not balanced")
            entries.append(Group(tuple(group)))
            group = None
            continue
        member: str | int
        if token == "\0":
            member = ELLIPSIS
        elif token.isdecimal():
            member = int(token)
            if member == 0:
                raise PatternSyntaxError("anonymous axes must have a positive length, not 0")
        else:
            if not all(char.isalnum() or char == "_" for char in token):
                bad = next(char for char in token if not (char.isalnum() or char == "_"))
                hint = " (operands are separated by commas only in einsum)" if bad == "," else ""
                raise PatternSyntaxError(f"unexpected character {bad!r}{hint}")
            _check_name(token, allow_underscore=einsum)
            member = token
        if isinstance(member, str):
            if member in seen and not duplicates and not (einsum and member == "_"):
                raise PatternSyntaxError(f'axis "{member}" appears twice on one side')
            seen.add(member)
        if group is not None:
            if member != 1:
                group.append(member)
        elif member == ELLIPSIS:
            entries.append(ELLIPSIS)
        else:
            entries.append(Group(() if member == 1 else (member,)))
    if group is not None:
        raise PatternSyntaxError("brackets are not balanced")
    return Side(tuple(entries))


TRANSFORMS = ("rearrange", "reduce", "repeat")


@functools.lru_cache(maxsize=1024)
def parse_transform(
    pattern: str, op: str, axes_given: frozenset[str], all_axes_given: bool = True
) -> tuple[Side, Side]:
    """Parse a ``rearrange``/``reduce``/``repeat`` pattern and check einops' rules for ``op``.

    ``axes_given`` are the names passed as ``**axes_lengths``; ``all_axes_given`` is False
    when the call also unpacks a mapping (``**sizes``), so axes may be given unseen.

    >>> left, right = parse_transform("b (h w) -> b h w", "rearrange", frozenset({"h"}))
    >>> right.names == {"b", "h", "w"}
    True
    >>> try:
    ...     parse_transform("a b -> a b c", "rearrange", frozenset())
    ... except PatternSyntaxError as error:
    ...     print(error)
    axis c appears only on the right side
    """
    if pattern.count("->") != 1:
        raise PatternSyntaxError('a pattern needs exactly one "->"')
    left_text, right_text = pattern.split("->")
    left, right = _parse_side(left_text), _parse_side(right_text)
    if right.has_ellipsis and not left.has_ellipsis:
        raise PatternSyntaxError("ellipsis on the right side but not on the left")
    if any(isinstance(entry, Group) and ELLIPSIS in entry.members for entry in left.entries):
        raise PatternSyntaxError("ellipsis inside parentheses on the left side")
    anonymous_left, anonymous_right = _has_anonymous(left), _has_anonymous(right)
    only_left, only_right = left.names - right.names, right.names - left.names
    if op == "rearrange":
        if anonymous_left or anonymous_right:
            raise PatternSyntaxError("rearrange takes no anonymous axes other than 1")
        if only_left or only_right:
            where = "left" if only_left else "right"
            raise PatternSyntaxError(
                f"axis {_names(only_left or only_right)} appears only on the {where} side"
            )
    elif op == "repeat":
        if only_left:
            raise PatternSyntaxError(f"axis {_names(only_left)} is on the left side of repeat")
        if anonymous_left:
            raise PatternSyntaxError("repeat takes no anonymous axes on the left side")
        if only_right - axes_given and all_axes_given:
            missing = _names(only_right - axes_given)
            raise PatternSyntaxError(f"new axis {missing} needs a size, e.g. {missing}=4")
    elif only_right:
        raise PatternSyntaxError(f"axis {_names(only_right)} appears only on the right side")
    elif anonymous_right:
        raise PatternSyntaxError("reduce takes no anonymous axes on the right side")
    unused = axes_given - left.names - right.names
    if unused:
        raise PatternSyntaxError(f"axis {_names(unused)} is given a size but not used")
    return left, right


@functools.lru_cache(maxsize=1024)
def parse_einsum(pattern: str) -> tuple[tuple[Side, ...], Side]:
    """Parse an ``einops.einsum`` pattern: comma-separated operands, ``->``, one output.

    >>> inputs, output = parse_einsum("b i, i o -> b o")
    >>> len(inputs), sorted(output.names)
    (2, ['b', 'o'])
    """
    if pattern.count("->") != 1:
        raise PatternSyntaxError('an einsum pattern needs exactly one "->"')
    left_text, right_text = pattern.split("->")
    inputs = tuple(_parse_side(text, einsum=True, duplicates=True) for text in left_text.split(","))
    output = _parse_side(right_text, einsum=True)
    if "," in right_text:
        raise PatternSyntaxError("einsum has one output")
    for side in (*inputs, output):
        for entry in side.entries:
            if isinstance(entry, Group) and len(entry.members) != 1:
                raise PatternSyntaxError("einsum takes no composite axes or ()")
            if isinstance(entry, Group) and isinstance(entry.members[0], int):
                raise PatternSyntaxError("einsum takes no anonymous axes")
    known = set().union(*(side.names for side in inputs))
    if output.names - known:
        raise PatternSyntaxError(f"output axis {_names(output.names - known)} is in no input")
    return inputs, output


def _has_anonymous(side: Side) -> bool:
    return any(
        isinstance(member, int)
        for entry in side.entries
        if isinstance(entry, Group)
        for member in entry.members
    )


def _names(names: set[str] | frozenset[str]) -> str:
    return ", ".join(sorted(names))


# --------------------------------------------------------------------------- flops formulas

_FORMULA_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(\*\*|//|[-+*/()]))")


class FormulaError(ValueError):
    """A ``flops=`` formula outside the grammar: names, integers, + - * / // ** and ()."""


@functools.lru_cache(maxsize=512)
def formula_names(formula: str) -> frozenset[str]:
    """The dim names a ``flops=`` formula uses; raises :class:`FormulaError` when invalid.

    >>> sorted(formula_names("2*batch*d_in*(d_in + 2*d_out)"))
    ['batch', 'd_in', 'd_out']
    >>> try:
    ...     formula_names("2*batch*")
    ... except FormulaError as error:
    ...     print(error)
    formula ends early
    """
    tokens: list[str] = []
    names: set[str] = set()
    position = 0
    text = formula.rstrip()
    while position < len(text):
        match = _FORMULA_TOKEN.match(text, position)
        if match is None:
            raise FormulaError(f"unexpected {text[position:].strip()[:1]!r}")
        number, name, operator = match.groups()
        if name is not None:
            names.add(name)
        tokens.append("n" if number or name else operator)
        position = match.end()
    if not tokens:
        raise FormulaError("formula is empty")
    _check_formula(tokens)
    return frozenset(names)


def _check_formula(tokens: list[str]) -> None:
    """Recursive-descent check of ``expr := ('+'|'-')* atom (op ('+'|'-')* atom)*``."""
    depth, expect_operand = 0, True
    for token in tokens:
        if expect_operand:
            if token == "n":
                expect_operand = False
            elif token == "(":
                depth += 1
            elif token not in "+-":
                raise FormulaError(f"unexpected {token!r}")
        elif token == ")":
            depth -= 1
            if depth < 0:
                raise FormulaError("unbalanced ')'")
        elif token in ("+", "-", "*", "/", "//", "**"):
            expect_operand = True
        else:
            raise FormulaError(f"unexpected {'name or number' if token == 'n' else repr(token)}")
    if expect_operand:
        raise FormulaError("formula ends early")
    if depth:
        raise FormulaError("unbalanced '('")
