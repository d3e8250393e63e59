"""Aligning patterns with annotated dims, binding axes, and the dims a pattern produces.

Pure functions over the values of :mod:`.static` and the grammar core's pattern sides; the
hooks turn the :class:`Finding` values returned here into diagnostics. Every function here
is conservative: where the alignment is uncertain (a variadic dim meeting named pattern
axes) it binds nothing and reports nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from ..syntax.patterns import ELLIPSIS, Entry, Group
from .static import UNKNOWN, Axis, Dim, Dims, Unknown, Variadic, format_dims

Severity = Literal["shape", "alias"]
ONE = Axis((), 1)
T = TypeVar("T")


@dataclass(frozen=True)
class Finding:
    """What a check found: ``shape`` is wrong whatever the sizes; ``alias`` holds only if
    sizes differ."""

    severity: Severity
    message: str


#: ``dim == product``: a pattern split the single-name ``dim`` into a group (``(d_k2 g)``
#: with ``g=2`` makes ``d_k`` equal to ``2*d_k2``), so the two are equal by construction.
Fact = tuple[str, Axis]


def _substituted(axis: Axis, facts: Sequence[Fact]) -> Axis:
    for _ in range(4):  # facts may chain (d = 2*h, h = 2*q); a few rounds suffice
        replaced = Axis((), axis.size)
        changed = False
        for factor in axis.factors:
            product = next((p for name, p in facts if name == factor), None)
            replaced = replaced.times(product if product is not None else Axis((factor,)))
            changed = changed or product is not None
        if not changed:
            return axis
        axis = replaced
    return axis


def equal_by_construction(first: Axis, second: Axis, facts: Sequence[Fact]) -> bool:
    """Whether the pattern facts make two axes equal (``d_k`` and ``2*d_k2`` above)."""
    return bool(facts) and _substituted(first, facts) == _substituted(second, facts)


def _split(items: Sequence[T], is_variadic: bool) -> tuple[Sequence[T], bool, Sequence[T]]:
    for index, item in enumerate(items):
        if (item == ELLIPSIS) if not is_variadic else isinstance(item, Variadic):
            return items[:index], True, items[index + 1 :]
    return items, False, ()


@dataclass
class Alignment:
    """Pairs of (pattern item, annotated dim), and what the pattern's ``...`` covers.

    ``ellipsis`` is None when it cannot be told (then it stands for unknown axes).
    """

    pairs: list[tuple[object, Dim]] = field(default_factory=list)
    ellipsis: Dims | None = None
    exact_variadics: tuple[Dim, Dim] | None = None


def align(
    items: Sequence[object], dims: Dims, *, items_are_dims: bool = False, label: str = ""
) -> Alignment | str:
    """Align pattern entries (or produced dims) with annotated ``dims``; a str is a rank error.

    ``items`` holds pattern entries with at most one ``ELLIPSIS``, or, when
    ``items_are_dims``, dims with at most one :class:`~.static.Variadic`.

    >>> from typedflops.mypy_plugin.static import parse_static
    >>> abc, xy = parse_static("a b c"), parse_static("x y")
    >>> assert abc is not None and xy is not None
    >>> result = align(abc, xy, items_are_dims=True)
    >>> result
    'has 3 axes where the annotation has 2'
    """
    head, open_items, tail = _split(items, items_are_dims)
    dims_head, open_dims, dims_tail = _split(dims, True)
    n_items, n_dims = len(head) + len(tail), len(dims_head) + len(dims_tail)
    rank_error = _rank_error(n_items, open_items, n_dims, open_dims, label or "the annotation")
    if rank_error:
        return rank_error
    result = Alignment()
    if not open_dims:
        # A fully ranked annotation: the items before "..." align with its first axes and
        # the items after it with its last axes.
        result.pairs += zip(head, dims_head[: len(head)], strict=True)
        if open_items:
            start = len(dims_head) - len(tail)
            result.pairs += zip(tail, dims_head[start:], strict=True)
            result.ellipsis = tuple(dims_head[len(head) : start])
        return result
    if not open_items:
        # The annotation's variadic takes the middle: compare both ends.
        result.pairs += zip(head[: len(dims_head)], dims_head, strict=True)
        if dims_tail:
            result.pairs += zip(head[len(head) - len(dims_tail) :], dims_tail, strict=True)
        return result
    n_head, n_tail = min(len(head), len(dims_head)), min(len(tail), len(dims_tail))
    result.pairs += zip(head[:n_head], dims_head[:n_head], strict=True)
    if n_tail:
        result.pairs += zip(tail[-n_tail:], dims_tail[-n_tail:], strict=True)
    if len(head) <= len(dims_head) and len(tail) <= len(dims_tail):
        variadic = dims[len(dims_head)]
        result.ellipsis = (
            *dims_head[len(head) :],
            variadic,
            *dims_tail[: len(dims_tail) - len(tail)],
        )
        if items_are_dims and len(head) == len(dims_head) and len(tail) == len(dims_tail):
            result.exact_variadics = (items[len(head)], variadic)  # type: ignore[assignment]
    return result


def _rank_error(
    n_items: int, open_items: bool, n_dims: int, open_dims: bool, label: str
) -> str | None:
    if not open_items and not open_dims and n_items != n_dims:
        return f"has {_axes(n_items)} where {label} has {n_dims}"
    if not open_items and open_dims and n_items < n_dims:
        return f"has {_axes(n_items)} where {label} has at least {n_dims}"
    if open_items and not open_dims and n_items > n_dims:
        return f"has at least {_axes(n_items)} where {label} has {n_dims}"
    return None


def _axes(count: int) -> str:
    return f"{count} axis" if count == 1 else f"{count} axes"


def compare(first: Dim, second: Dim, facts: Sequence[Fact] = ()) -> Severity | None:
    """How two dims of one axis disagree: never for unknowns, equal dims, or dims that
    patterns made equal by construction (``facts``)."""
    if isinstance(first, Unknown) or isinstance(second, Unknown) or first == second:
        return None
    if isinstance(first, Variadic) or isinstance(second, Variadic):
        if isinstance(first, Variadic) and isinstance(second, Variadic):
            return "alias" if first.name and second.name else None
        return None
    if first.is_fixed and second.is_fixed:
        return "shape"
    if first.factors == second.factors:
        return "shape"  # the same names times different integers (2*n, n): never equal
    # A name meeting a number is how sizes get fixed (`h=4`, `"b 3"`): never reported.
    if first.is_fixed or second.is_fixed or equal_by_construction(first, second, facts):
        return None
    return "alias"


class Bindings:
    """Pattern axis name -> the annotated dim it was bound to first, and where.

    ``facts`` are the decompositions known before this call (see :data:`Fact`);
    ``new_facts`` those this call's pattern adds.
    """

    def __init__(self, facts: Sequence[Fact] = ()) -> None:
        self.name_to_dim: dict[str, tuple[Dim, str]] = {}
        self.facts: list[Fact] = list(facts)
        self.new_facts: list[Fact] = []
        # einsum broadcasts an axis of size 1 against any size (torch.einsum does).
        self.broadcast_ones = False

    def bind(self, axis: str, dim: Dim, origin: str, *, noun: str = "axis") -> Finding | None:
        """Bind ``axis`` to ``dim``; a :class:`Finding` when it was bound to another dim."""
        if isinstance(dim, Unknown):
            return None
        if axis not in self.name_to_dim:
            self.name_to_dim[axis] = (dim, origin)
            return None
        previous, previous_origin = self.name_to_dim[axis]
        if self.broadcast_ones and ONE in (previous, dim):
            if previous == ONE:
                self.name_to_dim[axis] = (dim, origin)  # the result takes the other size
            return None
        severity = compare(previous, dim, self.facts)
        if severity is None:
            return None
        return Finding(
            severity,
            f'{noun} "{axis}" is "{previous}" in {previous_origin} but "{dim}" in {origin}',
        )

    def dim_of(self, axis: str) -> Dim:
        """The bound dim, or :data:`~.dims.UNKNOWN`."""
        bound = self.name_to_dim.get(axis)
        return bound[0] if bound else UNKNOWN


def bind_side(
    entries: Sequence[Entry],
    dims: Dims,
    origin: str,
    bindings: Bindings,
    sizes: Mapping[str, Dim] | None = None,
) -> tuple[Alignment | None, list[Finding], str | None]:
    """Bind one pattern side to an operand's dims: (alignment, binding problems, rank error).

    A group such as ``(d_k2 g)`` facing a single-name dim ``d_k`` adds the fact
    ``d_k == d_k2*g`` (``g`` read from ``sizes``, the call's axis lengths) to
    ``bindings.new_facts``.
    """
    alignment = align(entries, dims, label=f'{origin} "{format_dims(dims)}"')
    if isinstance(alignment, str):
        return None, [], alignment
    problems: list[Finding] = []
    for entry, dim in alignment.pairs:
        # Only single-name groups bind: "(h w)" against one dim cannot be split statically.
        if isinstance(entry, Group) and len(entry.members) == 1:
            member = entry.members[0]
            if isinstance(member, str):
                problem = bindings.bind(member, dim, origin)
            elif isinstance(dim, Axis) and dim.is_fixed and dim.size != member:
                problem = Finding("shape", f'anonymous axis {member} is "{dim}" in {origin}')
            else:
                problem = None
            if problem:
                problems.append(problem)
        elif isinstance(entry, Group) and not entry.members and _fixed_not_one(dim):
            problems.append(Finding("shape", f'axis "()" of size 1 is "{dim}" in {origin}'))
        elif isinstance(entry, Group):
            product = _decomposition(entry, sizes or {})
            if product is None or not isinstance(dim, Axis):
                continue
            if product.is_fixed and dim.is_fixed and product.size != dim.size:
                problems.append(
                    Finding("shape", f'axis "{entry}" of size {product} is "{dim}" in {origin}')
                )
            elif _single_name(dim):
                bindings.new_facts.append((dim.factors[0], product))
    return alignment, problems, None


def _single_name(dim: Axis) -> bool:
    return len(dim.factors) == 1 and dim.size == 1


def _decomposition(group: Group, sizes: Mapping[str, Dim]) -> Axis | None:
    """The product a group stands for, its names read as dims of the same name."""
    product = Axis()
    for member in group.members:
        if member == ELLIPSIS:
            return None
        size = sizes.get(member) if isinstance(member, str) else Axis((), member)
        if isinstance(member, str) and not isinstance(size, Axis):
            size = Axis((member,))
        assert isinstance(size, Axis)
        product = product.times(size)
    return product


def _fixed_not_one(dim: Dim) -> bool:
    return isinstance(dim, Axis) and dim.is_fixed and dim.size != 1


def produce(
    entries: Sequence[Entry], bindings: Bindings, ellipsis: Dims | None, sizes: Mapping[str, Dim]
) -> Dims:
    """The dims of a pattern's output side, in the names the inputs were annotated with."""
    produced: list[Dim] = []
    for entry in entries:
        if entry == ELLIPSIS:
            produced.extend(ellipsis if ellipsis is not None else (Variadic(None),))
        elif isinstance(entry, Group):
            produced.append(_product(entry, bindings, ellipsis, sizes))
    return tuple(produced)


def _product(
    group: Group, bindings: Bindings, ellipsis: Dims | None, sizes: Mapping[str, Dim]
) -> Dim:
    axis = Axis()
    for member in group.members:
        parts: Sequence[Dim]
        if isinstance(member, int):
            parts = (Axis((), member),)
        elif member == ELLIPSIS:
            parts = ellipsis if ellipsis is not None else (UNKNOWN,)
        else:
            bound = bindings.dim_of(member)
            parts = (sizes.get(member, UNKNOWN) if isinstance(bound, Unknown) else bound,)
        for part in parts:
            if not isinstance(part, Axis):
                return UNKNOWN
            axis = axis.times(part)
    return axis


def _same_named_variadic(first: Dims, second: Dims) -> str | None:
    """``*name`` when each side has exactly that one variadic dim."""
    mine = [dim for dim in first if isinstance(dim, Variadic)]
    theirs = [dim for dim in second if isinstance(dim, Variadic)]
    if len(mine) == len(theirs) == 1 and mine[0].name and mine[0] == theirs[0]:
        return str(mine[0])
    return None


def check_produced(produced: Dims, annotated: Dims, facts: Sequence[Fact] = ()) -> Finding | None:
    """Compare the dims a call produces with the dims its result is annotated with."""
    same_variadic = _same_named_variadic(produced, annotated)
    if same_variadic is not None:
        # One binding of *name on both sides: the axes around it must count the same.
        fixed, expected = len(produced) - 1, len(annotated) - 1
        if fixed != expected:
            return Finding(
                "shape",
                f"has {_axes(fixed)} besides {same_variadic} where the annotation has {expected}",
            )
    alignment = align(produced, annotated, items_are_dims=True)
    if isinstance(alignment, str):
        return Finding("shape", alignment)
    pairs: list[tuple[object, Dim]] = list(alignment.pairs)
    if alignment.exact_variadics:
        pairs.append(alignment.exact_variadics)
    worst: Finding | None = None
    for item, dim in pairs:
        assert isinstance(item, (Axis, Variadic, Unknown))
        severity = compare(item, dim, facts)
        if severity == "shape" or (severity == "alias" and worst is None):
            worst = Finding(severity, f'"{item}" where the annotation has "{dim}"')
    return worst


__all__ = [
    "Alignment",
    "Bindings",
    "Fact",
    "Finding",
    "align",
    "bind_side",
    "check_produced",
    "compare",
    "produce",
]
