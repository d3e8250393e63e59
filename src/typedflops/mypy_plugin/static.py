"""Dims as the plugin compares them, read from the grammar core's parse.

A tensor's dims are a tuple of:

- :class:`Axis` -- one axis of known symbolic size, a product of names times an integer
  (``batch``, ``3``, ``c*h*w``, ``2*d``);
- :class:`Variadic` -- any number of axes (``*batch``, or ``...`` when anonymous);
- :data:`UNKNOWN` -- one axis whose size the plugin cannot name (``_``, ``#b``, ``n+1``).

Everything unknown is gradual: it matches anything and never causes a diagnostic. Dims are
written back as dim strings (:func:`format_dims`), which the core reads again
(:func:`parse_static`), so what travels on mypy's types is always jaxtyping's grammar.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TypeAlias

from ..syntax import Problem
from ..syntax.dims import Dim as CoreDim
from ..syntax.dims import DimKind, parse_dims
from ..syntax.formula import Integer, Name, Node, Operation

__all__ = [
    "UNKNOWN",
    "Axis",
    "Dim",
    "Dims",
    "Unknown",
    "Variadic",
    "annotation_names",
    "bindable_names",
    "format_dims",
    "named_dims",
    "parse_static",
]


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


def _product(node: Node) -> Axis | None:
    """A formula made of ``*``, names and integers as an :class:`Axis`; None otherwise."""
    if isinstance(node, Name):
        return Axis((node.id,))
    if isinstance(node, Integer):
        return Axis((), node.value) if node.value >= 0 else None
    if isinstance(node, Operation) and node.op == "*":
        left, right = _product(node.left), _product(node.right)
        return left.times(right) if left is not None and right is not None else None
    return None


def _static(dim: CoreDim) -> Dim:
    if dim.kind is DimKind.ANONYMOUS_VARIADIC:
        return Variadic(None)
    if dim.kind is DimKind.VARIADIC:
        return Variadic(None if dim.broadcastable else dim.name)
    if dim.broadcastable or dim.kind is DimKind.ANONYMOUS:
        return UNKNOWN
    if dim.kind is DimKind.FIXED:
        assert dim.size is not None
        return Axis((), dim.size)
    if dim.kind is DimKind.NAMED:
        assert dim.name is not None
        return Axis((dim.name,))
    assert dim.formula is not None
    return _product(dim.formula.tree) or UNKNOWN


@functools.lru_cache(maxsize=4096)
def parse_static(dim_str: str) -> Dims | None:
    """The dims of a dim string, or None where the grammar core rejects it (then nothing
    about that annotation is checked).

    >>> [str(d) for d in parse_static("*batch d_in c*h*w _ 3 #b n+1")]
    ['*batch', 'd_in', 'c*h*w', '_', '3', '_', '_']
    >>> parse_static("a, b") is None
    True
    """
    try:
        return tuple(_static(dim) for dim in parse_dims(dim_str))
    except Problem:
        return None


@functools.lru_cache(maxsize=4096)
def annotation_names(dim_str: str) -> frozenset[str]:
    """Every dim name a dim string uses (named, ``#``, ``*name`` and symbolic), as the
    runtime counts them for ``flops=`` formulas; ``ellipsis`` for an anonymous ``...``."""
    names: set[str] = set()
    try:
        dims = parse_dims(dim_str)
    except Problem:
        return frozenset()
    for dim in dims:
        if dim.name and dim.kind in (DimKind.NAMED, DimKind.VARIADIC):
            names.add(dim.name)
        elif dim.formula is not None:
            names |= dim.formula.names
        elif dim.kind is DimKind.ANONYMOUS_VARIADIC:
            names.add("ellipsis")
    return frozenset(names)


@functools.lru_cache(maxsize=4096)
def bindable_names(dim_str: str) -> frozenset[str]:
    """The dim names a tensor of this annotation binds at runtime (named and ``*name``)."""
    try:
        dims = parse_dims(dim_str)
    except Problem:
        return frozenset()
    kinds = (DimKind.NAMED, DimKind.VARIADIC)
    return frozenset(dim.name for dim in dims if dim.kind in kinds and dim.name)


def format_dims(dims: Dims) -> str:
    """The jaxtyping spelling of ``dims``; ``parse_static(format_dims(d)) == d``."""
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
