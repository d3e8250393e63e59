"""jaxtyping dim strings (``"*batch seq d_model"``) parsed into :class:`Dim` items.

The grammar is jaxtyping's, read item by item as jaxtyping reads it: fixed sizes (``3``,
``rows=3``), named dims (``batch``), ``*name`` and ``...`` (any number of axes), ``#name``
(size 1 broadcasts), ``_`` and ``_name`` (anything), ``name=expr`` and symbolic expressions
such as ``n+1`` (see :mod:`.formula`). Where jaxtyping raises, :func:`parse_dims` raises a
:class:`~typedflops.syntax.Problem` too; it also rejects what typedflops cannot check:
``?name`` (dims that depend on a location in a PyTree, which jaxtyping allows only inside
PyTree annotations), negative sizes, empty names and symbolic axes outside the formula
grammar.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from . import Problem
from .formula import Formula, parse_formula

__all__ = ["Dim", "DimKind", "parse_dims", "with_ellipsis"]


class DimKind(Enum):
    """What one item of a dim string says about the axis (or axes) it matches."""

    FIXED = "fixed"  # "3" or "rows=3"
    NAMED = "named"  # "batch"
    SYMBOLIC = "symbolic"  # "n+1", "h*dh"
    ANONYMOUS = "anonymous"  # "_" or "_name"
    VARIADIC = "variadic"  # "*batch": any number of axes, bound together
    ANONYMOUS_VARIADIC = "anonymous_variadic"  # "..."


@dataclass(frozen=True)
class Dim:
    """One item of a dim string: its kind, name, size or formula, and whether ``#`` lets
    size 1 broadcast."""

    kind: DimKind
    name: str | None = None
    size: int | None = None
    formula: Formula | None = None
    broadcastable: bool = False

    @property
    def text(self) -> str:
        """How the item reads in a dim string (``parse_dims`` reads it back the same)."""
        prefix = "#" if self.broadcastable else ""
        if self.kind is DimKind.FIXED:
            return f"{prefix}{self.size}"
        if self.kind is DimKind.SYMBOLIC:
            assert self.formula is not None
            return f"{prefix}{self.formula.text}"
        if self.kind is DimKind.ANONYMOUS_VARIADIC:
            return "..."
        if self.kind is DimKind.ANONYMOUS:
            return "_"
        star = "*" if self.kind is DimKind.VARIADIC else ""
        return f"{prefix}{star}{self.name}"


def _modifiers(item: str) -> tuple[str, bool, bool, bool, bool]:
    """jaxtyping's prefix loop: (rest, broadcastable, variadic, anonymous, treepath)."""
    broadcastable = variadic = anonymous = treepath = False
    while item:
        first = item[0]
        if first == "#":
            if broadcastable:
                raise Problem("'#' is used twice (e.g. '##foo')")
            broadcastable, item = True, item[1:]
        elif first == "*":
            if variadic:
                raise Problem("'*' is used twice (e.g. '**foo')")
            variadic, item = True, item[1:]
        elif first == "_":
            if anonymous:
                raise Problem("'_' is used twice (e.g. '__foo')")
            anonymous, item = True, item[1:]
        elif first == "?":
            if treepath:
                raise Problem("'?' is used twice (e.g. '??foo')")
            treepath, item = True, item[1:]
        elif item.count("=") == 1:
            item = item.split("=")[1]  # "rows=3" means 3
        else:
            break
    return item, broadcastable, variadic, anonymous, treepath


def _fixed_size(item: str) -> int | None:
    # jaxtyping reads a size with int(), so "1_000" and "+3" are sizes (and "0x10" is not).
    try:
        return int(item)
    except ValueError:
        return None


def _parse_item(item: str) -> Dim:
    if "," in item and "(" not in item:
        raise Problem("axes are separated with spaces, not commas")
    if item.endswith("#"):
        raise Problem(f"'{item}': a broadcastable axis is written with '#' first ('#name')")
    if "..." in item:
        if item != "...":
            raise Problem(f"'{item}': '...' must be used on its own")
        return Dim(DimKind.ANONYMOUS_VARIADIC)
    rest, broadcastable, variadic, anonymous, treepath = _modifiers(item)
    if treepath:
        raise Problem(
            f"'{item}': '?' dims depend on a location in a PyTree, which typedflops does "
            "not check; name the dim without '?'"
        )
    if not rest or rest.isidentifier():
        if anonymous:
            if broadcastable:
                raise Problem(f"'{item}': an axis cannot be both anonymous and broadcastable")
            return Dim(DimKind.ANONYMOUS_VARIADIC if variadic else DimKind.ANONYMOUS)
        if not rest and variadic and not broadcastable:
            # jaxtyping's bare '*': a variadic dim named '', shared by the call's annotations
            return Dim(DimKind.VARIADIC, name="")
        if not rest:
            raise Problem(f"'{item}' names no dim")
        kind = DimKind.VARIADIC if variadic else DimKind.NAMED
        return Dim(kind, name=rest, broadcastable=broadcastable)
    size = _fixed_size(rest)
    if size is not None:
        if variadic:
            raise Problem(f"'{item}': a fixed size cannot match several axes")
        if anonymous:
            raise Problem(f"'{item}': a fixed size cannot be anonymous")
        if size < 0:
            raise Problem(f"'{item}': a size cannot be negative")
        return Dim(DimKind.FIXED, size=size, broadcastable=broadcastable)
    if anonymous:
        raise Problem(f"'{item}': a symbolic axis cannot be anonymous")
    if variadic:
        raise Problem(f"'{item}': a symbolic axis cannot match several axes")
    try:
        formula = parse_formula(rest)
    except Problem as problem:
        raise Problem(f"symbolic axis {rest!r}: {problem.reason}") from None
    return Dim(DimKind.SYMBOLIC, formula=formula, broadcastable=broadcastable)


@functools.lru_cache(maxsize=4096)
def parse_dims(dim_str: str) -> tuple[Dim, ...]:
    """Parse a jaxtyping dim string (cached); raises :class:`Problem` where jaxtyping or
    typedflops would reject it.

    >>> [dim.text for dim in parse_dims("*batch rows=3 #n _k n+1")]
    ['*batch', '3', '#n', '_', 'n+1']
    >>> parse_dims("b ?t")
    Traceback (most recent call last):
      ...
    typedflops.syntax.Problem: '?t': '?' dims depend on a location in a PyTree, which typedflops does not check; name the dim without '?'
    """  # noqa: E501
    dims = tuple(_parse_item(item) for item in dim_str.split())
    variadic = (DimKind.VARIADIC, DimKind.ANONYMOUS_VARIADIC)
    if sum(dim.kind in variadic for dim in dims) > 1:
        raise Problem("'*name' or '...' may be used only once")
    return dims


def with_ellipsis(names: Iterable[str], has_ellipsis: bool, ellipsis: str) -> tuple[str, ...]:
    """The names a dim string or a pattern side gives its axes: ``names`` in order, then
    ``ellipsis`` (what its anonymous ``...`` goes by) when it has one.

    >>> with_ellipsis(("batch", "d"), True, "ellipsis")
    ('batch', 'd', 'ellipsis')
    >>> with_ellipsis(("h", "w"), False, "...")
    ('h', 'w')
    """
    return (*names, ellipsis) if has_ellipsis else tuple(names)
