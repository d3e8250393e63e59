"""One jaxtyping annotation, parsed once into a :class:`TensorSpec`.

The dim string of ``Float[Tensor, "batch d_in"]`` is parsed by the grammar core
(:mod:`typedflops.syntax.dims`, the same parse the mypy plugin reads) and jaxtyping's
``dtypes`` are resolved once, into a flat tuple of axis rules and a frozen set of allowed
``torch.dtype`` objects, so that checking a tensor is a short loop over its shape with no
string work per call.
"""

from __future__ import annotations

import functools
import re
import typing
from dataclasses import dataclass
from typing import Any

import jaxtyping
import sympy
import torch

from ..errors import SpecError
from ..syntax import Problem
from ..syntax.dims import Dim, DimKind, parse_dims
from ..syntax.expr import Expression, dim_symbol, parse_expression
from ..text import dtype_name

__all__ = [
    "ELLIPSIS",
    "Axis",
    "AxisKind",
    "TensorSpec",
    "array_type_name",
    "contains_tensor_annotation",
    "is_tensor_annotation",
    "is_torch_annotation",
    "tensor_spec",
]

#: The symbol that an anonymous ``...`` stands for in formulas.
ELLIPSIS = "ellipsis"


#: What one item of a dim string says about the axis (or axes) it matches.
AxisKind = DimKind
_VARIADIC_KINDS = (DimKind.VARIADIC, DimKind.ANONYMOUS_VARIADIC)


@dataclass(frozen=True)
class Axis:
    """One item of a dim string: its kind, name or size, and whether ``#`` allows size 1."""

    kind: AxisKind
    name: str | None = None
    size: int | None = None
    expression: Expression | None = None
    broadcastable: bool = False

    @property
    def text(self) -> str:
        """How the item reads in the annotation."""
        if self.kind is AxisKind.FIXED:
            return str(self.size)
        if self.kind is AxisKind.SYMBOLIC:
            assert self.expression is not None
            return self.expression.text
        if self.kind is AxisKind.ANONYMOUS_VARIADIC:
            return "..."
        prefix = "*" if self.kind is AxisKind.VARIADIC else ""
        return ("#" if self.broadcastable else "") + prefix + (self.name or "_")

    def symbol(self, size: int) -> sympy.Expr:
        """The formula term of this axis (the size of an anonymous axis is a number)."""
        if self.kind is AxisKind.FIXED:
            return sympy.Integer(size)
        if self.kind is AxisKind.SYMBOLIC:
            assert self.expression is not None
            return self.expression.sympy
        if self.kind is AxisKind.ANONYMOUS_VARIADIC:
            return dim_symbol(ELLIPSIS)
        if self.kind is AxisKind.ANONYMOUS or self.name is None:
            return sympy.Integer(size)
        return dim_symbol(self.name)


@dataclass(frozen=True)
class TensorSpec:
    """A parsed ``Dtype[Tensor, "dims"]`` annotation.

    ``axes`` are the dim-string items in order, ``variadic_index`` the position of the one
    ``*name``/``...`` item (or None), ``dtypes`` the allowed torch dtypes (None: any).
    """

    hint: Any
    dim_str: str
    dtype_label: str
    dtypes: frozenset[torch.dtype] | None
    axes: tuple[Axis, ...]
    variadic_index: int | None

    @property
    def label(self) -> str:
        """The annotation as a user wrote it, e.g. ``Float[Tensor, "batch d_in"]``."""
        return f'{self.dtype_label}[Tensor, "{self.dim_str}"]'

    @property
    def names(self) -> tuple[str, ...]:
        """Dimension names used by this annotation (named, variadic and symbolic), in order."""
        found: list[str] = []
        for axis in self.axes:
            if axis.kind in (AxisKind.NAMED, AxisKind.VARIADIC) and axis.name:
                found.append(axis.name)
            elif axis.kind is AxisKind.SYMBOLIC and axis.expression is not None:
                found.extend(sorted(axis.expression.names))
        return tuple(dict.fromkeys(found))

    @property
    def has_ellipsis(self) -> bool:
        """Whether the annotation has an anonymous ``...``."""
        return any(axis.kind is AxisKind.ANONYMOUS_VARIADIC for axis in self.axes)

    @property
    def variadic_names(self) -> tuple[str, ...]:
        """Names of its ``*name`` dims."""
        return tuple(a.name for a in self.axes if a.kind is AxisKind.VARIADIC and a.name)

    @property
    def bindable_names(self) -> tuple[str, ...]:
        """Names a tensor of this annotation binds (named and ``*name`` dims, in order)."""
        return tuple(
            a.name for a in self.axes if a.kind in (AxisKind.NAMED, AxisKind.VARIADIC) and a.name
        )

    def dtype_reason(self) -> str:
        """What dtypes the annotation allows, in words."""
        if self.dtypes is None:
            return "any dtype"
        names = sorted(dtype_name(d) for d in self.dtypes)
        article = "an" if self.dtype_label[:1] in "AEIOU" else "a"
        if len(names) > 6:
            return f"{article} {self.dtype_label} dtype ({', '.join(names[:5])}, ...)"
        return f"{article} {self.dtype_label} dtype ({', '.join(names)})"


_ALL_TORCH_DTYPES: tuple[torch.dtype, ...] = tuple(
    dict.fromkeys(v for v in vars(torch).values() if isinstance(v, torch.dtype))
)


def _torch_dtypes(jaxtyping_dtypes: Any) -> frozenset[torch.dtype] | None:
    # jaxtyping names a torch dtype by the tail of its repr ("torch.float32" -> "float32")
    # and matches it against strings or regexes; we resolve that once, here.
    if not isinstance(jaxtyping_dtypes, (list, tuple)):
        return None  # jaxtyping's "any dtype" sentinel (Shaped)
    allowed: set[torch.dtype] = set()
    for dtype in _ALL_TORCH_DTYPES:
        name = repr(dtype).rsplit(".", 1)[-1]
        for wanted in jaxtyping_dtypes:
            if (isinstance(wanted, str) and wanted == name) or (
                isinstance(wanted, re.Pattern) and wanted.match(name)
            ):
                allowed.add(dtype)
    return frozenset(allowed)


def _axis(dim: Dim, dim_str: str) -> Axis:
    expression = None
    if dim.formula is not None:
        origin = f'annotation "{dim_str}": symbolic axis'
        expression = parse_expression(dim.formula.text, origin=origin)
    return Axis(dim.kind, dim.name, dim.size, expression, dim.broadcastable)


def is_tensor_annotation(hint: Any) -> bool:
    """Whether ``hint`` is a jaxtyping array annotation (``Float[Tensor, "..."]`` and kin),
    of torch tensors or of another array type."""
    return isinstance(hint, type) and issubclass(hint, jaxtyping.AbstractArray)


def contains_tensor_annotation(hint: Any) -> bool:
    """Whether ``hint`` is a tensor annotation or holds one (``list[Float[Tensor, "n"]]``)."""
    if is_tensor_annotation(hint):
        return True
    return any(contains_tensor_annotation(arg) for arg in typing.get_args(hint))


def is_torch_annotation(hint: Any) -> bool:
    """Whether ``hint`` is a jaxtyping annotation of torch tensors, which typedflops compiles
    itself (``Float[Tensor, "n"]``, ``Float[Any, "n"]``); other array types
    (``Float[np.ndarray, "n"]``, ``Float[LinearOperator, "n n"]``) are checked by jaxtyping.

    >>> import numpy as np
    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> is_torch_annotation(Float[Tensor, "n"]), is_torch_annotation(Float[np.ndarray, "n"])
    (True, False)
    """
    if not is_tensor_annotation(hint):
        return False
    array_type = hint.array_type
    return array_type is Any or (
        isinstance(array_type, type) and issubclass(array_type, torch.Tensor)
    )


def array_type_name(hint: Any) -> str:
    """How messages name an annotation's array type: ``Tensor``, ``ndarray``,
    ``LinearOperator``."""
    array_type = hint.array_type
    if array_type is Any or (isinstance(array_type, type) and issubclass(array_type, torch.Tensor)):
        return "Tensor"
    name = getattr(array_type, "__name__", None)
    return name if isinstance(name, str) else repr(array_type).replace("typing.", "")


@functools.cache
def tensor_spec(hint: Any) -> TensorSpec:
    """Parse a jaxtyping annotation once (cached) into a :class:`TensorSpec`.

    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> spec = tensor_spec(Float[Tensor, "batch d_in"])
    >>> spec.label, spec.names
    ('Float[Tensor, "batch d_in"]', ('batch', 'd_in'))
    """
    array_type = hint.array_type
    if array_type is not Any and not (
        isinstance(array_type, type) and issubclass(array_type, torch.Tensor)
    ):
        raise SpecError.at(
            f"annotation {hint.__name__}",
            f"typedflops checks torch tensors; the array type {array_type!r} is not torch.Tensor",
        )
    dim_str: str = hint.dim_str
    try:
        dims = parse_dims(dim_str)
    except Problem as problem:
        raise SpecError.at(f'annotation "{dim_str}"', problem.reason) from None
    axes = tuple(_axis(dim, dim_str) for dim in dims)
    return TensorSpec(
        hint=hint,
        dim_str=dim_str,
        dtype_label=getattr(hint.dtype, "__name__", "Shaped"),
        dtypes=_torch_dtypes(hint.dtypes),
        axes=axes,
        variadic_index=next((i for i, a in enumerate(axes) if a.kind in _VARIADIC_KINDS), None),
    )
