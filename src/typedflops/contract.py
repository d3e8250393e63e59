"""A function's signature, compiled once into a contract that checks a call in one pass.

``compile_contract(fn)`` reads the type hints of ``fn`` once. Each hint becomes a *checker*:
a closure that inspects one value and binds the dims it finds in the call's
:class:`CallState`. A call then costs one loop over its arguments; jaxtyping's parse, string
formatting and beartype's reasons are only touched when something is wrong.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from beartype.door import die_if_unbearable, is_bearable
from beartype.roar import BeartypeDoorHintViolation

from .annotation import AxisKind, TensorSpec, is_tensor_annotation, tensor_spec
from .errors import ContractError, DeviceError, DtypeError, ShapeError, SpecError
from .expr import Expression

__all__ = ["CallState", "Contract", "compile_contract", "display_name"]

Origin = tuple[str, tuple[int, ...], int]  # (where, shape, axis) that bound a dim
Size = int | tuple[int, ...]  # a named dim's size, or a variadic dim's sizes


_NO_NAMES: frozenset[str] = frozenset()


class CallState:
    """The dims bound by one call, where each was bound, and the call's device.

    Wrapped ops look the enclosing call's state up to check their axes against it.
    """

    __slots__ = (
        "broadcast_variadic",
        "device",
        "device_where",
        "function",
        "origins",
        "pending",
        "sizes",
    )

    def __init__(self, function: str) -> None:
        self.function = function
        self.sizes: dict[str, Size] = {}
        self.origins: dict[str, Origin | str] = {}
        self.device: torch.device | None = None
        self.device_where = ""
        # Symbolic axes wait until every argument has bound its dims:
        # (expression, dim string, axis, size, where, shape).
        self.pending: list[tuple[Expression, str, int, int, str, tuple[int, ...]]] = []
        # Variadic dims last bound by a broadcastable ``#*name`` (jaxtyping's rule: such a
        # binding may still grow by broadcasting against a later argument).
        self.broadcast_variadic: frozenset[str] = _NO_NAMES

    def bind(self, name: str, size: Size, origin: Origin | str) -> None:
        """Bind ``name`` before any argument is seen (e.g. from a module's own sizes)."""
        self.sizes[name] = size
        self.origins[name] = origin

    def bound_so_far(self) -> str:
        """``batch=8, d_in=784``: the bindings, for the last line of an error."""
        return ", ".join(f"{name}={_size_text(size)}" for name, size in self.sizes.items())

    def origin_line(self, name: str) -> str:
        """Where ``name`` was bound, in words, or an empty string if it is not bound."""
        origin = self.origins.get(name)
        if origin is None:
            return ""
        size = _size_text(self.sizes[name])
        if isinstance(origin, str):
            return f"{name}={size} was bound by {origin}"
        where, shape, axis = origin
        return f"{name}={size} was bound by {where} (shape {_shape_text(shape)}, axis {axis})"


def _size_text(size: Size) -> str:
    return str(size) if isinstance(size, int) else _shape_text(size)


def _shape_text(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def display_name(fn: Callable[..., Any]) -> str:
    """The name used in messages: the qualified name without ``<locals>`` noise."""
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    return str(qualname).rsplit("<locals>.", 1)[-1]


# A checker inspects one value at a place ("argument 'x'", "argument 'xs[2]'", "the return
# value") and binds dims in the state, raising a ContractError subclass on a violation.
Checker = Callable[[Any, CallState, str], None]


def _violation(
    cls: type[ContractError],
    state: CallState,
    where: str,
    reason: str,
    *,
    dim: str | None = None,
    expected: Any = None,
    actual: Any = None,
    origin_dims: Sequence[str] = (),
) -> ContractError:
    lines = [f"{state.function}(): {where} {reason}"]
    lines.extend(line for name in origin_dims if (line := state.origin_line(name)))
    if state.sizes:
        lines.append(f"bound so far: {state.bound_so_far()}")
    argument = where.removeprefix("argument ").strip("'") if where.startswith("arg") else "return"
    return cls(
        "\n  ".join(lines),
        function=state.function,
        argument=argument,
        dim=dim,
        expected=expected,
        actual=actual,
        bindings=state.sizes,
    )


def _tensor_checker(spec: TensorSpec) -> Checker:
    """The checker for one ``Dtype[Tensor, "dims"]`` annotation (the hot path)."""
    dtypes = spec.dtypes
    axes = spec.axes
    variadic = spec.variadic_index
    rank = len(axes)
    before = axes if variadic is None else axes[:variadic]
    after = () if variadic is None else axes[variadic + 1 :]
    # Flatten the rules to tuples so the per-call loop touches no attributes.
    rules_before = tuple((a.kind, a.name, a.size, a.broadcastable, a.expression) for a in before)
    rules_after = tuple((a.kind, a.name, a.size, a.broadcastable, a.expression) for a in after)
    variadic_axis = None if variadic is None else axes[variadic]

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
        reason = f'has shape {_shape_text(shape)} but its annotation "{spec.dim_str}" needs {needs}'
        return _violation(
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
        rules: tuple[tuple[AxisKind, str | None, int | None, bool, Expression | None], ...],
        shape: tuple[int, ...],
        offset: int,
        state: CallState,
        where: str,
    ) -> None:
        sizes = state.sizes
        for index, (kind, name, fixed, broadcastable, expression) in enumerate(rules):
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
                        state, where, shape, f"size {fixed} at axis {axis}", None, fixed, size
                    )
            elif kind is AxisKind.SYMBOLIC:
                assert expression is not None
                state.pending.append((expression, spec.dim_str, axis, size, where, shape))

    def check(value: Any, state: CallState, where: str) -> None:
        if not isinstance(value, torch.Tensor):
            raise _violation(
                ContractError,
                state,
                where,
                f"is {_type_name(value)} but its annotation {spec.label} needs a torch.Tensor",
                expected=spec.label,
                actual=type(value).__name__,
            )
        if dtypes is not None and value.dtype not in dtypes:
            actual = str(value.dtype).removeprefix("torch.")
            raise _violation(
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
            raise _violation(
                DeviceError,
                state,
                where,
                f"is on {device} but {state.device_where} is on {state.device}; "
                "all tensors of one call must be on one device",
                expected=state.device,
                actual=device,
            )
        shape: tuple[int, ...] = value.shape
        ndim = len(shape)
        if variadic is None:
            if ndim != rank:
                raise shape_error(
                    state, where, shape, f"{rank} dimension{'s' * (rank != 1)}", None, rank, ndim
                )
            check_axes(rules_before, shape, 0, state, where)
            return
        if ndim < rank - 1:
            raise shape_error(
                state, where, shape, f"at least {rank - 1} dimensions", None, rank - 1, ndim
            )
        check_axes(rules_before, shape, 0, state, where)
        middle_end = ndim - len(rules_after)
        check_axes(rules_after, shape, middle_end, state, where)
        assert variadic_axis is not None
        if variadic_axis.kind is AxisKind.VARIADIC:
            name = variadic_axis.name
            assert name is not None
            group = tuple(shape[len(rules_before) : middle_end])
            bound = state.sizes.get(name)
            if bound is None:
                state.sizes[name] = group
                state.origins[name] = (where, shape, len(rules_before))
                if variadic_axis.broadcastable:
                    state.broadcast_variadic |= {name}
            elif bound != group or state.broadcast_variadic:
                bind_variadic(state, where, shape, name, typing.cast(tuple[int, ...], bound), group)

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
            f"*{name}={_size_text(bound)}",
            name,
            bound,
            group,
            origin_dims=(name,),
        )

    return check


class UnresolvedHintError(SpecError, NameError):
    """A type hint names something that is not defined (yet)."""


def _type_name(value: Any) -> str:
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _contains_tensor_annotation(hint: Any) -> bool:
    if is_tensor_annotation(hint):
        return True
    return any(_contains_tensor_annotation(arg) for arg in typing.get_args(hint))


def _beartype_checker(hint: Any) -> Checker:
    """Non-tensor hints follow beartype's semantics; plain classes take a fast isinstance."""
    fast_class = hint if isinstance(hint, type) and hint not in (float, complex) else None

    def check(value: Any, state: CallState, where: str) -> None:
        if fast_class is not None and isinstance(value, fast_class):
            return
        if is_bearable(value, hint):
            return
        try:
            die_if_unbearable(value, hint)
        except BeartypeDoorHintViolation as exc:
            reason = _beartype_reason(str(exc))
        else:  # pragma: no cover - beartype disagreed with itself
            return
        raise _violation(
            ContractError,
            state,
            where,
            f"violates its hint {_hint_text(hint)}: {reason}",
            expected=_hint_text(hint),
            actual=type(value).__name__,
        )

    return check


def _beartype_reason(text: str) -> str:
    """beartype's reason without its preamble: ``Die_if_unbearable() value 'a' violates
    type hint <class 'int'>, as str 'a' not instance of int.`` -> ``str 'a' not instance
    of int``."""
    first = text.splitlines()[0] if text else text
    _, found, tail = first.partition(" violates type hint ")
    if found:
        _, found, reason = tail.partition(", as ")
        if found:
            return reason.rstrip(".")
    return first.removeprefix("Die_if_unbearable() ")


def _hint_text(hint: Any) -> str:
    if is_tensor_annotation(hint):
        return tensor_spec(hint).label
    if isinstance(hint, type):
        return hint.__name__
    return repr(hint).replace("typing.", "")


def _union_checker(hint: Any, options: tuple[Any, ...]) -> Checker:
    checkers = [(option, compile_hint(option)) for option in options]

    def check(value: Any, state: CallState, where: str) -> None:
        first_error: ContractError | None = None
        for _option, checker in checkers:
            trial = CallState(state.function)
            trial.sizes = dict(state.sizes)
            trial.origins = dict(state.origins)
            trial.device, trial.device_where = state.device, state.device_where
            trial.broadcast_variadic = state.broadcast_variadic
            try:
                checker(value, trial, where)
            except ContractError as exc:
                first_error = first_error or exc
                continue
            state.sizes, state.origins = trial.sizes, trial.origins
            state.device, state.device_where = trial.device, trial.device_where
            state.broadcast_variadic = trial.broadcast_variadic
            state.pending.extend(trial.pending)
            return
        if len(checkers) == 1 or (
            value is not None and sum(o is not type(None) for o, _ in checkers) == 1
        ):
            assert first_error is not None
            raise first_error
        raise _violation(
            ContractError,
            state,
            where,
            f"is {_type_name(value)} which matches none of {_hint_text(hint)}",
            expected=_hint_text(hint),
            actual=type(value).__name__,
        )

    return check


def _item_where(where: str, key: str) -> str:
    """Where an element is: ``argument 'xs'`` -> ``argument 'xs[3]'``,
    ``the return value`` -> ``the return value[3]``."""
    if where.endswith("'"):
        return f"{where[:-1]}[{key}]'"
    return f"{where}[{key}]"


def _sequence_checker(container: type, item_checker: Checker) -> Checker:
    # Every element is checked: beartype samples one element of a container per call.
    def check(value: Any, state: CallState, where: str) -> None:
        if not isinstance(value, container):
            raise _violation(
                ContractError,
                state,
                where,
                f"is {_type_name(value)} but its hint needs a {container.__name__}",
                expected=container.__name__,
                actual=type(value).__name__,
            )
        for index, item in enumerate(typing.cast(Iterable[Any], value)):
            item_checker(item, state, _item_where(where, str(index)))

    return check


def _tuple_checker(item_checkers: list[Checker]) -> Checker:
    def check(value: Any, state: CallState, where: str) -> None:
        if not isinstance(value, tuple) or len(value) != len(item_checkers):
            raise _violation(
                ContractError,
                state,
                where,
                f"is {_type_name(value)} but its hint needs a tuple of {len(item_checkers)}",
                expected=len(item_checkers),
                actual=type(value).__name__,
            )
        for index, (item, item_checker) in enumerate(zip(value, item_checkers, strict=True)):
            item_checker(item, state, _item_where(where, str(index)))

    return check


def _mapping_checker(key_hint: Any, value_checker: Checker) -> Checker:
    def check(value: Any, state: CallState, where: str) -> None:
        if not isinstance(value, Mapping):
            raise _violation(
                ContractError,
                state,
                where,
                f"is {_type_name(value)} but its hint needs a mapping",
                expected="Mapping",
                actual=type(value).__name__,
            )
        for key, item in value.items():
            if not is_bearable(key, key_hint):
                raise _violation(
                    ContractError,
                    state,
                    where,
                    f"has key {key!r} that violates {_hint_text(key_hint)}",
                )
            value_checker(item, state, _item_where(where, repr(key)))

    return check


def compile_hint(hint: Any) -> Checker:
    """Compile one type hint into a checker (tensor annotations, containers of them, others)."""
    if is_tensor_annotation(hint):
        return _tensor_checker(tensor_spec(hint))
    if not _contains_tensor_annotation(hint):
        return _beartype_checker(hint)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _union_checker(hint, args)
    if origin in (list, Sequence, set, frozenset, typing.Iterable) and len(args) == 1:
        container = (
            origin
            if isinstance(origin, type) and origin is not Sequence
            else (Sequence if origin is Sequence else object)
        )
        return _sequence_checker(container, compile_hint(args[0]))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _sequence_checker(tuple, compile_hint(args[0]))
        return _tuple_checker([compile_hint(arg) for arg in args])
    if origin in (dict, Mapping) and len(args) == 2:
        return _mapping_checker(args[0], compile_hint(args[1]))
    raise SpecError(f"hint {_hint_text(hint)}: typedflops cannot check tensors inside {origin}")


def _tensor_specs(hint: Any) -> list[TensorSpec]:
    if is_tensor_annotation(hint):
        return [tensor_spec(hint)]
    return [spec for arg in typing.get_args(hint) for spec in _tensor_specs(arg)]


@dataclass(frozen=True)
class Parameter:
    """One parameter of the contract: its name, position, kind and compiled checker."""

    name: str
    index: int | None  # position for positional parameters, else None
    kind: inspect._ParameterKind
    checker: Checker | None
    hint: Any

    @property
    def where(self) -> str:
        """How messages name it: ``argument 'x'``."""
        return f"argument '{self.name}'"


class Contract:
    """The compiled contract of one function: its parameters' checkers and its return's."""

    def __init__(self, fn: Callable[..., Any], function_name: str) -> None:
        self.function = function_name
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except NameError as exc:
            # A forward reference not defined yet: a NameError, so that the decorator
            # retries at the first call, and a SpecError if it is still undefined then.
            raise UnresolvedHintError(
                f"{function_name}(): cannot resolve its type hints ({exc})"
            ) from None
        except Exception as exc:
            raise SpecError(f"{function_name}(): cannot resolve its type hints ({exc})") from None
        signature = inspect.signature(fn)
        self.signature = signature
        self.parameters: list[Parameter] = []
        self.var_positional: Parameter | None = None
        self.var_keyword: Parameter | None = None
        self.specs: dict[str, list[TensorSpec]] = {}
        first_name = next(iter(signature.parameters), None)
        # A method's unannotated `self` may carry dims of its own (see `module_dims`).
        self.takes_self = first_name in ("self", "cls") and first_name not in hints
        for index, (name, param) in enumerate(signature.parameters.items()):
            hint = hints.get(name)
            checker = compile_hint(hint) if name in hints and hint is not Any else None
            if hint is not None:
                self.specs[name] = _tensor_specs(hint)
            positional = param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)
            entry = Parameter(name, index if positional else None, param.kind, checker, hint)
            if param.kind is param.VAR_POSITIONAL:
                self.var_positional = entry
            elif param.kind is param.VAR_KEYWORD:
                self.var_keyword = entry
            else:
                self.parameters.append(entry)
        self.positional = [p for p in self.parameters if p.index is not None]
        self.keyword = {
            p.name: p for p in self.parameters if p.kind is not inspect.Parameter.POSITIONAL_ONLY
        }
        self.return_hint = hints.get("return")
        self.return_checker = (
            compile_hint(self.return_hint)
            if "return" in hints and self.return_hint is not Any
            else None
        )
        if self.return_hint is not None:
            self.specs["return"] = _tensor_specs(self.return_hint)
        self.checked = [p for p in self.parameters if p.checker is not None]
        self._plan: list[tuple[int | None, str, Checker, str]] = [
            (p.index, p.name, p.checker, p.where) for p in self.checked if p.checker is not None
        ]
        self._check_symbolic_names()

    def dim_names(self) -> set[str]:
        """Every dim name that the annotations of the parameters and the return use."""
        return {name for specs in self.specs.values() for spec in specs for name in spec.names}

    def _check_symbolic_names(self) -> None:
        argument_axes = [
            axis
            for key, specs in self.specs.items()
            if key != "return"
            for spec in specs
            for axis in spec.axes
        ]
        bindable = {a.name for a in argument_axes if a.kind is AxisKind.NAMED and a.name}
        variadic = {a.name for a in argument_axes if a.kind is AxisKind.VARIADIC and a.name}
        for key, specs in self.specs.items():
            for spec in specs:
                for axis in spec.axes:
                    if axis.kind is AxisKind.SYMBOLIC and axis.expression is not None:
                        where = "return" if key == "return" else f"parameter '{key}'"
                        multi = sorted((axis.expression.names & variadic) - bindable)
                        if multi:
                            raise SpecError(
                                f'{self.function}(): {where} annotation "{spec.dim_str}" '
                                f'uses {", ".join(multi)} in "{axis.expression.text}", but '
                                f"{multi[0]} is a variadic dim (*{multi[0]}); a symbolic axis "
                                "can only use single dims"
                            )
                        missing = sorted(axis.expression.names - bindable - variadic)
                        if missing and not self.takes_self:
                            # (a module may bind dims that no argument names)
                            raise SpecError(
                                f'{self.function}(): {where} annotation "{spec.dim_str}" '
                                f'uses {", ".join(missing)} in "{axis.expression.text}" but '
                                "no parameter's annotation binds it"
                            )

    def check_arguments(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], state: CallState
    ) -> None:
        """Check every argument of a call, binding dims in ``state``; raise on a violation."""
        count = len(args)
        # (index, name, checker, where) tuples built once: no attribute or string work here.
        for index, name, checker, where in self._plan:
            if index is not None and index < count:
                value = args[index]
            elif name in kwargs:
                value = kwargs[name]
            else:
                continue  # a default: not the caller's to check
            checker(value, state, where)
        extra = self.var_positional
        if extra is not None and extra.checker is not None and count > len(self.positional):
            for offset, value in enumerate(args[len(self.positional) :]):
                extra.checker(value, state, f"argument '{extra.name}[{offset}]'")
        extra = self.var_keyword
        if extra is not None and extra.checker is not None:
            for key, value in kwargs.items():
                if key not in self.keyword:
                    extra.checker(value, state, f"argument '{key}'")
        if state.pending:
            self.resolve_symbolic(state)

    def check_return(self, value: Any, state: CallState) -> None:
        """Check the return value against the return annotation, with the call's bindings."""
        if self.return_checker is not None:
            self.return_checker(value, state, "the return value")
            if state.pending:
                self.resolve_symbolic(state)

    def resolve_symbolic(self, state: CallState) -> None:
        """Check symbolic axes (``n+1``) once every named dim of the arguments is bound."""
        pending, state.pending = state.pending, []
        for expression, dim_str, axis, size, where, shape in pending:
            try:
                expected = expression.evaluate(typing.cast(Mapping[str, int], state.sizes))
            except KeyError as exc:
                raise SpecError(
                    f'{state.function}(): symbolic axis "{expression.text}" in "{dim_str}"'
                    f" uses {exc.args[0]}, which no argument bound"
                ) from None
            except TypeError:  # a variadic dim (a tuple) in the expression
                raise SpecError(
                    f'{state.function}(): symbolic axis "{expression.text}" in "{dim_str}"'
                    " uses a variadic dim; a symbolic axis can only use single dims"
                ) from None
            if expected != size:
                reason = (
                    f'has shape {_shape_text(shape)} but its annotation "{dim_str}" '
                    f"needs {expression.text}={expected} at axis {axis}"
                )
                raise _violation(
                    ShapeError,
                    state,
                    where,
                    reason,
                    dim=expression.text,
                    expected=expected,
                    actual=size,
                    origin_dims=sorted(expression.names),
                )


def compile_contract(fn: Callable[..., Any], function_name: str | None = None) -> Contract:
    """Compile the contract of ``fn`` (raises :class:`SpecError` for a bad annotation)."""
    return Contract(fn, function_name or display_name(fn))
