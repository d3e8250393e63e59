"""Dims attached to mypy's tensor types by jaxtyping annotations.

A jaxtyping annotation such as ``Float[Tensor, "batch d_in"]`` gives the analysed
``Tensor`` an extra attribute (:data:`ANNOTATED`, on ``Instance.extra_attrs``), which
survives mypy's cache and the daemon and does not change subtyping. Its value is a type
whose equality ignores what it carries (a type variable: mypy compares those by id, while
the daemon's snapshot reads its name), so two tensors annotated with different dims are
still the same type to mypy: unions, joins and mypy's own messages read as plain mypy's
(``Tensor``, never ``Tensor | Tensor``), and an edited annotation still reaches the daemon.

Dims are read from declarations only (a parameter's annotation, an annotated local or
attribute, a callee's signature), never from the type mypy gives an expression: that type
may be a narrowed, joined or leaked one. What a call produces is kept beside the types, in
:mod:`.values`.
"""

from __future__ import annotations

from mypy.checker import TypeChecker
from mypy.nodes import FuncItem
from mypy.plugin import CheckerPluginInterface
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    NoneType,
    ProperType,
    Type,
    TypeOfAny,
    TypeVarId,
    TypeVarType,
    UnionType,
    get_proper_type,
)

from .static import UNKNOWN, Axis, Dim, Dims, Variadic, bindable_names, parse_static

__all__ = [
    "ANNOTATED",
    "TENSOR",
    "alternatives",
    "annotated_dims",
    "annotation_label",
    "annotation_text",
    "bound_names",
    "current_function",
    "is_tensor",
    "plain",
    "with_annotation",
    "without_free_names",
]

ANNOTATED = "__typedflops_dims__"
TENSOR = "torch._tensor.Tensor"
# Every payload has this id, so payloads compare (and hash) equal whatever their dims.
_PAYLOAD_ID = TypeVarId(-271828, namespace="typedflops.dims")


def is_tensor(typ: ProperType) -> bool:
    """Whether ``typ`` is ``torch.Tensor`` or a subclass (``nn.Parameter``)."""
    return isinstance(typ, Instance) and typ.type.has_base(TENSOR)


def with_annotation(typ: Instance, dim_str: str, dtype: str, object_type: Instance) -> Instance:
    """``typ`` annotated with ``dim_str`` (jaxtyping's ``dtype``, e.g. ``Float``)."""
    payload = TypeVarType(
        dim_str,
        dtype,
        _PAYLOAD_ID,
        [],
        object_type,
        AnyType(TypeOfAny.from_omitted_generics),
    )
    return typ.copy_with_extra_attr(ANNOTATED, payload)


def _payload(typ: Type | None) -> TypeVarType | None:
    proper = get_proper_type(typ)
    if not isinstance(proper, Instance) or proper.extra_attrs is None:
        return None
    value = get_proper_type(proper.extra_attrs.attrs.get(ANNOTATED))
    return value if isinstance(value, TypeVarType) else None


def annotation_text(typ: Type | None) -> str | None:
    """The dim string of the jaxtyping annotation that gave ``typ``, as written."""
    payload = _payload(typ)
    return payload.name if payload is not None else None


def _items(typ: Type | None) -> list[ProperType]:
    proper = get_proper_type(typ)
    if isinstance(proper, UnionType):
        return [get_proper_type(item) for item in proper.items]
    return [proper] if proper is not None else []


def alternatives(typ: Type | None) -> list[Dims] | None:
    """The dims of each tensor a declared type allows (``None`` items left out), or None
    when one of them is a tensor without readable dims."""
    found: list[Dims] = []
    for item in _items(typ):
        text = annotation_text(item)
        if text is None:
            if is_tensor(item) or isinstance(item, AnyType):
                return None  # any tensor at all may come
            continue  # None, a float, another array type: not a tensor
        dims = parse_static(text)
        if dims is None:
            return None
        found.append(dims)
    return found or None


def annotated_dims(typ: Type | None) -> Dims | None:
    """Dims a jaxtyping annotation gave ``typ`` (in the annotating function's names).

    ``Optional[Float[Tensor, "b n"]]`` has the dims of its tensor: a value that reaches a
    shape check is that tensor (None fails there anyway). Any other union has none.
    """
    items = [item for item in _items(typ) if not isinstance(item, NoneType)]
    if len(items) != 1:
        return None
    text = annotation_text(items[0])
    return parse_static(text) if text is not None else None


def annotation_label(typ: Type | None) -> str | None:
    """How a message spells a declared type: ``Float[Tensor, "a b"] | None``."""
    labels: list[str] = []
    for item in _items(typ):
        payload = _payload(item)
        if isinstance(item, NoneType):
            labels.append("None")
        elif payload is not None and isinstance(item, Instance):
            labels.append(f'{payload.fullname}[{item.type.name}, "{payload.name}"]')
        else:
            return None
    return " | ".join(labels) if labels else None


def plain(typ: Type) -> Type:
    """``typ`` without dims: what plain mypy gives a call's result."""
    proper = get_proper_type(typ)
    if not isinstance(proper, Instance) or proper.extra_attrs is None or not is_tensor(proper):
        return typ
    stripped = proper.copy_modified()
    stripped.extra_attrs = None
    return stripped


def bound_names(function: FuncItem) -> frozenset[str]:
    """The dim names the function's parameters bind (named and ``*name`` dims)."""
    signature = function.type
    if not isinstance(signature, CallableType):
        return frozenset()
    names: set[str] = set()
    for typ in signature.arg_types:
        for item in _items(typ):
            text = annotation_text(item)
            if text is not None:
                names |= bindable_names(text)
    return frozenset(names)


def without_free_names(dims: Dims, bound: frozenset[str]) -> Dims:
    """``dims`` with every dim name no parameter binds made unknown (it matches anything)."""
    kept: list[Dim] = []
    for dim in dims:
        if isinstance(dim, Axis) and not set(dim.factors) <= bound:
            kept.append(UNKNOWN)
        elif isinstance(dim, Variadic) and dim.name and dim.name not in bound:
            kept.append(Variadic(None))
        else:
            kept.append(dim)
    return tuple(kept)


def current_function(api: CheckerPluginInterface) -> FuncItem | None:
    """The function being checked, if any."""
    return api.scope.current_function() if isinstance(api, TypeChecker) else None
