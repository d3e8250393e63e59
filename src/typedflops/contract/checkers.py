"""Type hints compiled into checkers: closures that inspect one value of a call.

Tensor annotations become a short loop over the shape with no string work; containers of
tensors check every element; other hints follow beartype's semantics.
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import types
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch

from ..errors import (
    ContractError,
    DeviceError,
    DtypeError,
    ShapeError,
    SpecError,
    UnresolvedHintError,
)
from ..syntax.expr import Expression
from ..text import dtype_name
from .annotation import (
    Axis,
    AxisKind,
    TensorSpec,
    contains_tensor_annotation,
    is_tensor_annotation,
    is_torch_annotation,
)
from .deferred import spec_of
from .other_arrays import other_array_checker
from .plain_hints import (
    Checker,
    hint_text,
    plain_checker,
    plain_predicate,
    simple_predicate,
    type_name,
    type_name_of,
)
from .scope import CallState, shape_text, size_text, violation
from .unchecked import compiling_leniently

__all__ = [
    "Checker",
    "UnresolvedHintError",
    "checks_plainly",
    "compile_hint",
    "hint_text",
    "tensor_specs",
]


# One axis of an annotation, flat: kind, name, fixed size, broadcastable, expression, and
# "size 3" (the text a message needs for a fixed size).
Rule = tuple[AxisKind, str | None, int | None, bool, Expression | None, str]


def _rule(axis: Axis) -> Rule:
    fixed_text = f"size {axis.size}"
    return (axis.kind, axis.name, axis.size, axis.broadcastable, axis.expression, fixed_text)


def _tensor_checker(spec: TensorSpec) -> Checker:
    """The checker for one ``Dtype[Tensor, "dims"]`` annotation (the hot path)."""
    dtypes = spec.dtypes
    axes = spec.axes
    variadic = spec.variadic_index
    rank = len(axes)
    before = axes if variadic is None else axes[:variadic]
    after = () if variadic is None else axes[variadic + 1 :]
    # Flatten the rules to tuples so the per-call loop touches no attributes.
    # (Message pieces are made here, as text: under torch.compile with dynamic shapes, the
    # ints of these rules may be traced as symbols, which an f-string cannot format.)
    rules_before = tuple(_rule(a) for a in before)
    rules_after = tuple(_rule(a) for a in after)
    variadic_axis = None if variadic is None else axes[variadic]
    rank_text = f"{rank} dimension{'s' if rank != 1 else ''}"
    minimum_text = f"at least {rank - 1} dimensions"
    plain_names: tuple[str, ...] | None = None
    if variadic is None and all(
        a.kind is AxisKind.NAMED and not a.broadcastable and a.name for a in axes
    ):
        plain_names = tuple(typing.cast(str, a.name) for a in axes)

    def shape_error(
        state: CallState,
        where: str,
        shape: tuple[int, ...],
        needs: str,
        dim: str | None,
        expected: Any,
        actual: Any,
        origin_dims: Sequence[str] = (),
    ) -> ContractError:
        reason = f'has shape {shape_text(shape)} but its annotation "{spec.dim_str}" needs {needs}'
        return violation(
            ShapeError,
            state,
            where,
            reason,
            dim=dim,
            expected=expected,
            actual=actual,
            origin_dims=origin_dims,
        )

    def check_axes(
        rules: tuple[Rule, ...],
        shape: tuple[int, ...],
        offset: int,
        state: CallState,
        where: str,
    ) -> None:
        sizes = state.sizes
        for index, (kind, name, fixed, broadcastable, expression, fixed_text) in enumerate(rules):
            axis = offset + index
            size = shape[axis]
            if broadcastable and size == 1:
                continue
            if kind is AxisKind.NAMED:
                assert name is not None
                bound = sizes.get(name)
                if bound is None:
                    sizes[name] = size
                    state.origins[name] = (where, shape, axis)
                elif bound != size:
                    raise shape_error(
                        state,
                        where,
                        shape,
                        f"{name}={bound}",
                        name,
                        bound,
                        size,
                        origin_dims=(name,),
                    )
            elif kind is AxisKind.FIXED:
                if size != fixed:
                    raise shape_error(
                        state, where, shape, f"{fixed_text} at axis {axis}", None, fixed, size
                    )
            elif kind is AxisKind.SYMBOLIC:
                assert expression is not None
                state.pending += ((expression, spec.dim_str, axis, size, where, shape),)

    def check(value: Any, state: CallState, where: str) -> None:
        if not isinstance(value, torch.Tensor):
            needs = f"its annotation {spec.label} needs a torch.Tensor"
            raise _wrong_kind(state, where, value, needs, spec.label)
        if dtypes is not None and value.dtype not in dtypes:
            actual = dtype_name(value.dtype)
            raise violation(
                DtypeError,
                state,
                where,
                f"has dtype {actual} but its annotation {spec.label} needs {spec.dtype_reason()}",
                expected=spec.dtype_reason(),
                actual=value.dtype,
            )
        device = value.device
        if state.device is None:
            state.device = device
            state.device_where = where
        elif device != state.device:
            raise violation(
                DeviceError,
                state,
                where,
                f"is on {device} but {state.device_where} is on {state.device}; "
                "all tensors of one call must be on one device",
                expected=state.device,
                actual=device,
            )
        try:
            shape: tuple[int, ...] = value.shape
        except RuntimeError:  # a nested tensor of the strided layout has no shape
            raise _shapeless(state, where, value, spec) from None
        ndim = len(shape)
        if variadic is None:
            if ndim != rank:
                raise shape_error(state, where, shape, rank_text, None, rank, ndim)
            if plain_names is None:
                check_axes(rules_before, shape, 0, state, where)
                return
            # The common case, every axis a plain name: one tight loop.
            sizes = state.sizes
            for axis, name in enumerate(plain_names):
                size = shape[axis]
                bound = sizes.get(name)
                if bound is None:
                    sizes[name] = size
                    state.origins[name] = (where, shape, axis)
                elif bound != size:
                    raise shape_error(
                        state, where, shape, f"{name}={bound}", name, bound, size, (name,)
                    )
            return
        if ndim < rank - 1:
            raise shape_error(state, where, shape, minimum_text, None, rank - 1, ndim)
        check_axes(rules_before, shape, 0, state, where)
        middle_end = ndim - len(rules_after)
        check_axes(rules_after, shape, middle_end, state, where)
        assert variadic_axis is not None
        if variadic_axis.kind is AxisKind.VARIADIC:
            group_name = variadic_axis.name
            assert group_name is not None
            group = tuple(shape[len(rules_before) : middle_end])
            bound = state.sizes.get(group_name)
            if bound is None:
                state.sizes[group_name] = group
                state.origins[group_name] = (where, shape, len(rules_before))
                if variadic_axis.broadcastable:
                    state.broadcast_variadic |= {group_name}
            elif bound != group or state.broadcast_variadic:
                bind_variadic(
                    state, where, shape, group_name, typing.cast(tuple[int, ...], bound), group
                )

    def bind_variadic(
        state: CallState,
        where: str,
        shape: tuple[int, ...],
        name: str,
        bound: tuple[int, ...],
        group: tuple[int, ...],
    ) -> None:
        # jaxtyping's rules for ``#*name``: a broadcastable binding or use may differ from
        # the other by broadcasting; the dims bound are then the broadcast shape.
        assert variadic_axis is not None
        broadcastable = variadic_axis.broadcastable
        was_broadcastable = name in state.broadcast_variadic
        if bound == group and not was_broadcastable:
            return
        merged: tuple[int, ...] | None = None
        if was_broadcastable or broadcastable:
            try:
                merged = tuple(torch.broadcast_shapes(bound, group))  # type: ignore[no-untyped-call]
            except RuntimeError:
                merged = None
        if was_broadcastable and merged is not None and (broadcastable or merged == group):
            state.sizes[name] = merged
            if not broadcastable:
                state.broadcast_variadic -= {name}
            return
        if not was_broadcastable and broadcastable and merged == bound:
            return
        if bound == group:
            return
        raise shape_error(
            state,
            where,
            shape,
            f"{name if name.startswith('*') else '*' + name}={size_text(bound)}",
            name,
            bound,
            group,
            origin_dims=(name,),
        )

    return check


def _shapeless(state: CallState, where: str, value: torch.Tensor, spec: TensorSpec) -> ShapeError:
    """The error for a tensor without a shape (a nested tensor of the strided layout)."""
    kind = f"a nested tensor of layout {value.layout}" if value.is_nested else "a tensor"
    return violation(
        ShapeError,
        state,
        where,
        f"is {kind}, which has no shape to check against its annotation "
        f'"{spec.dim_str}" (nested tensors of layout torch.jagged have one)',
        expected=spec.dim_str,
        actual=f"{value.layout}",
    )


def _wrong_kind(
    state: CallState, where: str, value: Any, needs: str, expected: Any
) -> ContractError:
    """``argument 'x' is a list but its annotation ... needs a torch.Tensor``."""
    return violation(
        ContractError,
        state,
        where,
        f"is {type_name(value)} but {needs}",
        expected=expected,
        actual=type(value).__name__,
    )


def _union_checker(hint: Any, options: tuple[Any, ...], apart: frozenset[str]) -> Checker:
    checkers = [(option, compile_hint(option, apart)) for option in options]
    none_allowed = type(None) in options
    # Options that bind no dims and need no trial (classes, Literal, None): asked first.
    plain = [p for o in options if not contains_tensor_annotation(o) and (p := simple_predicate(o))]

    def check(value: Any, state: CallState, where: str) -> None:
        if value is None and none_allowed:
            return  # `X | None` given None: nothing to try, no error to build
        for predicate in plain:
            if predicate(value):
                return
        errors: list[tuple[Any, ContractError]] = []
        for option, checker in checkers:
            trial = state.copy()
            try:
                checker(value, trial, where)
            except ContractError as exc:
                errors.append((option, exc))
                continue
            state.adopt(trial)
            return
        if len(checkers) == 1 or (
            value is not None and sum(o is not type(None) for o, _ in checkers) == 1
        ):
            raise errors[0][1]
        # Why each option failed, one line each, without the call's own prefix.
        prefix = f"{state.function}(): "
        reasons = []
        whys = set()
        for option, error in errors:
            why = f"{error}".split("\n", 1)[0].removeprefix(prefix)
            why = why.removeprefix(f"{where} ")
            if option is type(None):
                why = "is not None"
            whys.add(why)
            reasons.append(f"\n  {hint_text(option)}: {why}")
        if len(whys) == 1:  # one reason for every option (a value that is no tuple at all)
            reasons = [f" ({whys.pop().removeprefix(f'is {type_name(value)} but ')})"]
        else:
            reasons.insert(0, ":")
        raise violation(
            ContractError,
            state,
            where,
            f"is {type_name(value)} which matches none of {hint_text(hint)}" + "".join(reasons),
            expected=hint_text(hint),
            actual=type(value).__name__,
        )

    return check


def _item_where(where: str, key: str) -> str:
    """Where an element is: ``argument 'xs'`` -> ``argument 'xs[3]'``,
    ``the return value`` -> ``the return value[3]``."""
    if where.endswith("'"):
        return f"{where[:-1]}[{key}]'"
    return f"{where}[{key}]"


def _elements_checker(container: type, item_checker: Checker, *, reiterable: bool) -> Checker:
    """A container's check: its type, then every element (beartype samples one element).

    ``reiterable``: the hint promises a collection that can be iterated again; otherwise
    (``Iterable[...]``) an iterator given for it is not consumed, only its type checked.
    """
    needs = f"its hint needs {type_name_of(container)}"

    def check(value: Any, state: CallState, where: str) -> None:
        if not isinstance(value, container):
            raise _wrong_kind(state, where, value, needs, container.__name__)
        if not reiterable and isinstance(value, Iterator):
            return
        for index, item in enumerate(typing.cast(Iterable[Any], value)):
            item_checker(item, state, _item_where(where, f"{index}"))

    return check


def _tuple_checker(item_checkers: list[Checker]) -> Checker:
    count = len(item_checkers)
    needs = f"its hint needs a tuple of {count}"

    def check(value: Any, state: CallState, where: str) -> None:
        if not isinstance(value, tuple) or len(value) != count:
            raise _wrong_kind(state, where, value, needs, count)
        for index, (item, item_checker) in enumerate(zip(value, item_checkers, strict=True)):
            item_checker(item, state, _item_where(where, f"{index}"))

    return check


def _mapping_checker(container: type, key_hint: Any, value_checker: Checker) -> Checker:
    key_ok = plain_predicate(key_hint)
    key_text = hint_text(key_hint)
    kind = "a mapping" if container is collections.abc.Mapping else type_name_of(container)
    needs = f"its hint needs {kind}"

    def check(value: Any, state: CallState, where: str) -> None:
        if not isinstance(value, container):
            raise _wrong_kind(state, where, value, needs, container.__name__)
        for key, item in typing.cast(Mapping[Any, Any], value).items():
            if not key_ok(key):
                reason = f"has key {key!r} that violates {key_text}"
                raise violation(ContractError, state, where, reason)
            value_checker(item, state, _item_where(where, repr(key)))

    return check


def _type_checker(container: type) -> Checker:
    """Only the value's type: what cannot be checked without consuming or calling it."""
    needs = f"its hint needs {type_name_of(container)}"

    def check(value: Any, state: CallState, where: str) -> None:
        if not isinstance(value, container):
            raise _wrong_kind(state, where, value, needs, container.__name__)

    return check


def _accept(value: Any, state: CallState, where: str) -> None:
    """A hint whose tensors cannot be checked and which names no class to check instead."""


# Containers that can be iterated again without being used up: every element is checked.
_COLLECTIONS: frozenset[Any] = frozenset(
    {
        list,
        set,
        frozenset,
        collections.deque,
        collections.abc.Collection,
        collections.abc.Sequence,
        collections.abc.MutableSequence,
        collections.abc.Set,
        collections.abc.MutableSet,
        collections.abc.KeysView,
        collections.abc.ValuesView,
    }
)
_MAPPINGS: frozenset[Any] = frozenset(
    {
        dict,
        collections.defaultdict,
        collections.OrderedDict,
        collections.abc.Mapping,
        collections.abc.MutableMapping,
    }
)


def _kept_apart(spec: TensorSpec, apart: frozenset[str]) -> TensorSpec:
    """``spec`` with its ``*name`` dim bound as ``*name`` when ``name`` is in ``apart``."""
    if spec.variadic_index is None:
        return spec
    axis = spec.axes[spec.variadic_index]
    if axis.kind is not AxisKind.VARIADIC or axis.name not in apart:
        return spec
    axes = list(spec.axes)
    axes[spec.variadic_index] = dataclasses.replace(axis, name=f"*{axis.name}")
    return dataclasses.replace(spec, axes=tuple(axes))


def compile_hint(hint: Any, apart: frozenset[str] = frozenset()) -> Checker:
    """Compile one type hint into a checker (tensor annotations, containers of them, others).

    What can be checked is: tensors, in any container that can be iterated again. What
    cannot (the values an iterator or generator will give, a callable's arguments) is
    accepted with only its type checked. ``apart``: names that the function uses both as a
    dim and as a variadic dim (``"n"`` and ``"*n"``), which jaxtyping keeps apart: their
    variadic dims are bound as ``*n``.
    """
    if is_tensor_annotation(hint):
        if not is_torch_annotation(hint):
            return other_array_checker(hint)
        try:
            spec = spec_of(hint)
        except SpecError:
            if not compiling_leniently():
                raise
            return other_array_checker(hint)  # outside typedflops' grammar: jaxtyping's
        return _tensor_checker(_kept_apart(spec, apart))
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return compile_hint(args[0], apart)
    if checks_plainly(hint):
        return plain_checker(hint)
    if origin in (typing.Union, types.UnionType):
        return _union_checker(hint, args, apart)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _elements_checker(tuple, compile_hint(args[0], apart), reiterable=True)
        return _tuple_checker([compile_hint(arg, apart) for arg in args])
    if origin in _MAPPINGS and len(args) == 2:
        # dict[...] takes any mapping, as it always has here (beartype wants a dict)
        container = collections.abc.Mapping if origin is dict else origin
        return _mapping_checker(container, args[0], compile_hint(args[1], apart))
    if origin in _COLLECTIONS and len(args) == 1:
        return _elements_checker(origin, compile_hint(args[0], apart), reiterable=True)
    if origin is collections.abc.Iterable and len(args) == 1:
        return _elements_checker(origin, compile_hint(args[0], apart), reiterable=False)
    if isinstance(origin, type):  # Iterator[...], Callable[...], a user's generic class
        return _type_checker(origin)
    return _accept


def checks_plainly(hint: Any) -> bool:
    """Whether ``hint`` is checked as beartype checks it (no tensors in it, not a container
    whose every element is checked here): a verdict on a value, binding no dims."""
    return not contains_tensor_annotation(hint) and not _checks_elements(hint)


def _checks_elements(hint: Any) -> bool:
    """Whether a hint without tensors is a container (or a union with one) whose elements
    are classes, ``None`` or ``Literal``: checked here, every element, where beartype checks
    one element picked at random (the same call could pass once and fail the next time)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_checks_elements(arg) for arg in args) and all(
            _checks_elements(arg) or simple_predicate(arg) is not None for arg in args
        )
    if origin is tuple:
        items = args[:1] if len(args) == 2 and args[1] is Ellipsis else args
    elif (origin in _COLLECTIONS or origin is collections.abc.Iterable) and len(args) == 1:
        items = args
    elif origin in _MAPPINGS and len(args) == 2:
        items = args[1:]
        if simple_predicate(args[0]) is None:
            return False
    else:
        return False
    if not items or all(item is Any or item is object for item in items):
        return False  # the container's type is all there is to check
    return all(simple_predicate(item) is not None or _checks_elements(item) for item in items)


def tensor_specs(hint: Any) -> list[TensorSpec]:
    """Every torch tensor annotation in ``hint``, parsed (deferred dims included); other
    array types are jaxtyping's to check and have no spec."""
    if is_tensor_annotation(hint):
        if not is_torch_annotation(hint):
            return []
        try:
            return [spec_of(hint)]
        except SpecError:
            if not compiling_leniently():
                raise
            return []
    return [spec for arg in typing.get_args(hint) for spec in tensor_specs(arg)]
