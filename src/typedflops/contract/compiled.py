"""A function's signature, compiled once into a contract that checks a call in one pass.

``compile_contract(fn)`` reads the type hints of ``fn`` once. Each hint becomes a *checker*:
a closure that inspects one value and binds the dims it finds in the call's
:class:`CallState`. A call then costs one loop over its arguments; jaxtyping's parse, string
formatting and beartype's reasons are only touched when something is wrong.
"""

from __future__ import annotations

import collections.abc
import inspect
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ContractError, ShapeError, SpecError, UnresolvedHintError
from .annotation import AxisKind, TensorSpec, is_torch_annotation
from .checkers import Checker, compile_hint, tensor_specs
from .deferred import PLACEHOLDER_PREFIX, argument_sizes, shown, spec_of
from .recall import CPU_FACTS, Facts, Outcome, recall_plan, recall_span, tensor_hint, verdict
from .scope import CallState, display_name, shape_text, violation
from .typevars import with_bounds
from .unchecked import (
    compiling_leniently,
    is_decorating,
    is_lenient,
    lenient_compilation,
    note,
    place,
)

__all__ = [
    "Contract",
    "Parameter",
    "compile_contract",
    "defining_frames",
    "frame_locals",
    "function_kind",
]


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


@dataclass(frozen=True)
class TensorParameter:
    """A parameter whose hint is one tensor annotation, or an Optional of one.

    ``defaults_to_none``: the parameter may be left out and is then None.
    """

    name: str
    index: int | None
    spec: TensorSpec
    optional: bool
    defaults_to_none: bool


class Contract:
    """The compiled contract of one function: its parameters' checkers and its return's."""

    def __init__(
        self,
        fn: Callable[..., Any],
        function_name: str,
        *,
        localns: Mapping[str, Any] | None = None,
    ) -> None:
        self.function = function_name
        hints = _resolve_hints(fn, function_name, localns)
        hints = _bounded(fn, function_name, hints)
        signature = inspect.signature(fn)
        self.signature = signature
        self.parameters: list[Parameter] = []
        self.var_positional: Parameter | None = None
        self.var_keyword: Parameter | None = None
        self.specs: dict[str, list[TensorSpec]] = {
            name: tensor_specs(hint) for name, hint in hints.items() if hint is not None
        }
        apart = _named_and_variadic(self.specs)
        first_name = next(iter(signature.parameters), None)
        # A method's unannotated `self` may carry dims of its own (see `module_dims`): read
        # only when a tensor annotation may use them (an `__init__(self, d: int)` runs
        # before the module has sizes to give).
        self.takes_self = (
            first_name in ("self", "cls") and first_name not in hints and any(self.specs.values())
        )
        for index, (name, param) in enumerate(signature.parameters.items()):
            hint = hints.get(name)
            checker = compile_hint(hint, apart) if name in hints and hint is not Any else None
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
        # A generator's body runs later: its return hint types what it yields (and, for a
        # Generator[Y, S, R], what it returns), checked as the body runs.
        self.kind = function_kind(fn)
        self.yield_checker: Checker | None = None
        self.return_checker: Checker | None = None
        if self.kind in (GENERATOR, ASYNC_GENERATOR):
            yielded, returned = generator_hints(self.return_hint)
            self.yield_checker = _checker_or_none(yielded, apart)
            self.return_checker = _checker_or_none(returned, apart)
        elif "return" in hints:
            self.return_checker = _checker_or_none(self.return_hint, apart)
        self.checked = [p for p in self.parameters if p.checker is not None]
        # (index, keyword name, checker, where) per checked parameter. A positional-only
        # parameter has no keyword name: a key of that name belongs to **kwargs.
        self._plan: list[tuple[int | None, str | None, Checker, str]] = [
            (p.index, None if p.kind is _POSITIONAL_ONLY else p.name, p.checker, p.where)
            for p in self.checked
            if p.checker is not None
        ]
        # `{name}` dims read the call's arguments.
        self.deferred = any("{" in spec.dim_str for specs in self.specs.values() for spec in specs)
        # What check_arguments does after the plain parameters, if anything.
        self._tail = self.deferred or any(
            p is not None and p.checker is not None for p in (self.var_positional, self.var_keyword)
        )
        self._check_symbolic_names()
        # Eager calls that read like an earlier one take its outcome (see .recall).
        # (a coroutine's or generator's body runs later, with checks of its own)
        recalls = self.kind == FUNCTION and not self._tail  # (no *args, **kwargs, {name})
        self.recall_plan = recall_plan(self.checked) if recalls else None
        self.recall_span = recall_span(self.recall_plan, len(self.positional))
        self.outcomes: dict[tuple[Any, ...], Outcome] = {}
        self.last_outcome: tuple[tuple[Any, ...] | None, Outcome | None] = (None, None)
        self.read_facts: Facts = CPU_FACTS
        self.recalls_return = tensor_hint(self.return_hint)
        #: For a return hint without tensors, its verdict on a value (it binds nothing).
        self.return_verdict = None if self.return_checker is None else verdict(self.return_hint)

    def tensor_parameters(self) -> list[TensorParameter]:
        """The parameters whose hint is a tensor annotation or an Optional of one, in order."""
        found: list[TensorParameter] = []
        for param in self.parameters:
            hint = param.hint
            options = typing.get_args(hint) if _is_union(hint) else (hint,)
            tensors = [o for o in options if is_torch_annotation(o)]
            if len(tensors) != 1 or any(
                o is not type(None) and not is_torch_annotation(o) for o in options
            ):
                continue
            if not tensor_specs(tensors[0]):  # (a lenient function's, outside the grammar)
                continue
            optional = type(None) in options
            default = self.signature.parameters[param.name].default
            found.append(
                TensorParameter(
                    name=param.name,
                    index=param.index,
                    spec=spec_of(tensors[0]),
                    optional=optional,
                    defaults_to_none=default is None,
                )
            )
        return found

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
                            raise SpecError.at(
                                f"{self.function}()",
                                f'{where} annotation "{spec.dim_str}" uses '
                                f'{", ".join(multi)} in "{axis.expression.text}", but '
                                f"{multi[0]} is a variadic dim (*{multi[0]}); a symbolic axis "
                                "can only use single dims",
                            )
                        missing = sorted(
                            name
                            for name in axis.expression.names - bindable - variadic
                            if not name.startswith(PLACEHOLDER_PREFIX)
                        )
                        if missing and not self.takes_self:
                            # (a module may bind dims that no argument names)
                            raise SpecError.at(
                                f"{self.function}()",
                                f'{where} annotation "{spec.dim_str}" uses '
                                f'{", ".join(missing)} in "{axis.expression.text}" but '
                                "no parameter's annotation binds it",
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
                value = kwargs[name]  # type: ignore[index]  # (None is in no kwargs)
            else:
                continue  # a default: not the caller's to check
            checker(value, state, where)
        if self._tail:
            self._check_rest(args, kwargs, state)
        elif state.pending:
            self.resolve_symbolic(state)

    def _check_rest(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], state: CallState
    ) -> None:
        """``*args`` and ``**kwargs``, and the arguments that ``{name}`` dims read."""
        count = len(args)
        extra = self.var_positional
        if extra is not None and extra.checker is not None and count > len(self.positional):
            try:
                for offset, value in enumerate(args[len(self.positional) :]):
                    extra.checker(value, state, f"argument '{extra.name}[{offset}]'")
            except ContractError as exc:
                if not _names_tuples(extra.hint):
                    raise
                raise _with_line(
                    exc,
                    f"(the hint of *{extra.name} is the type of each argument it collects, "
                    "not of their tuple)",
                ) from None
        extra = self.var_keyword
        if extra is not None and extra.checker is not None:
            for key, value in kwargs.items():
                if key not in self.keyword:
                    extra.checker(value, state, f"argument '{key}'")
        if self.deferred:
            state.arguments = self.arguments(args, kwargs)
        if state.pending:
            self.resolve_symbolic(state)

    def arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name, defaults included (as ``Signature.bind``
        with ``apply_defaults``, without its checks)."""
        found: dict[str, Any] = {}
        for param in self.positional:
            if param.index is not None and param.index < len(args):
                found[param.name] = args[param.index]
        for key, value in kwargs.items():
            if key in self.keyword:
                found[key] = value
        for name, declared in self.signature.parameters.items():
            if name not in found and declared.default is not inspect.Parameter.empty:
                found[name] = declared.default
        if self.var_positional is not None:
            found[self.var_positional.name] = args[len(self.positional) :]
        if self.var_keyword is not None:
            found[self.var_keyword.name] = {
                k: v for k, v in kwargs.items() if k not in self.keyword
            }
        return found

    def check_return(self, value: Any, state: CallState) -> None:
        """Check the return value against the return annotation, with the call's bindings."""
        if self.return_checker is not None:
            self.return_checker(value, state, "the return value")
            if state.pending:
                self.resolve_symbolic(state)

    def check_yield(self, value: Any, state: CallState) -> None:
        """Check one value a generator yielded, against the dims its arguments bound.

        Dims that only the yield annotation names are bound anew for each value (a data
        generator's last batch may be smaller): ``state`` is not changed.
        """
        if self.yield_checker is not None:
            trial = state.copy()
            self.yield_checker(value, trial, "the yielded value")
            if trial.pending:
                self.resolve_symbolic(trial)

    def resolve_symbolic(self, state: CallState) -> None:
        """Check symbolic axes (``n+1``) once every named dim of the arguments is bound."""
        pending, state.pending = state.pending, ()
        for expression, dim_str, axis, size, where, shape in pending:
            sizes = typing.cast(Mapping[str, int], state.sizes)
            if state.arguments is not None:
                where_call = f"{state.function}()"
                sizes = {
                    **sizes,
                    **argument_sizes(expression.names, state.arguments, where_call),
                }
            try:
                expected = expression.evaluate(sizes)
            except KeyError as exc:
                raise SpecError.at(
                    f"{state.function}()",
                    f'symbolic axis "{shown(expression.text)}" in "{dim_str}" uses '
                    f"{exc.args[0]}, which no argument bound",
                ) from None
            except TypeError:  # a variadic dim (a tuple) in the expression
                raise SpecError.at(
                    f"{state.function}()",
                    f'symbolic axis "{shown(expression.text)}" in "{dim_str}" uses a variadic '
                    "dim; a symbolic axis can only use single dims",
                ) from None
            if expected != size:
                reason = (
                    f'has shape {shape_text(shape)} but its annotation "{dim_str}" '
                    f"needs {shown(expression.text)}={expected} at axis {axis}"
                )
                raise violation(
                    ShapeError,
                    state,
                    where,
                    reason,
                    dim=shown(expression.text),
                    expected=expected,
                    actual=size,
                    origin_dims=sorted(expression.names),
                )


FUNCTION, COROUTINE, GENERATOR, ASYNC_GENERATOR = (
    "function",
    "coroutine",
    "generator",
    "async generator",
)


def function_kind(fn: Callable[..., Any]) -> str:
    """``"generator"``, ``"async generator"``, ``"coroutine"`` or ``"function"``."""
    if inspect.isasyncgenfunction(fn):
        return ASYNC_GENERATOR
    if inspect.isgeneratorfunction(fn):
        return GENERATOR
    if inspect.iscoroutinefunction(fn):
        return COROUTINE
    return FUNCTION


_YIELDING = {
    collections.abc.Iterator,
    collections.abc.Iterable,
    collections.abc.Generator,
    collections.abc.AsyncIterator,
    collections.abc.AsyncIterable,
    collections.abc.AsyncGenerator,
}


def generator_hints(hint: Any) -> tuple[Any, Any]:
    """What a generator annotated ``hint`` yields and returns (None: not said).

    >>> generator_hints(collections.abc.Generator[int, None, str])
    (<class 'int'>, <class 'str'>)
    >>> generator_hints(typing.Iterator[int])
    (<class 'int'>, None)
    """
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin not in _YIELDING or not args:
        return None, None
    returned = args[2] if origin is collections.abc.Generator and len(args) == 3 else None
    return args[0], returned


_POSITIONAL_ONLY = inspect.Parameter.POSITIONAL_ONLY


def _checker_or_none(hint: Any, apart: frozenset[str]) -> Checker | None:
    if hint is None or hint is Any:
        return None
    return compile_hint(hint, apart)


def _named_and_variadic(specs: Mapping[str, list[TensorSpec]]) -> frozenset[str]:
    """Names used both as a dim (``"n"``) and as a variadic dim (``"*n"``): jaxtyping
    keeps the two apart, as two dims."""
    axes = [axis for found in specs.values() for spec in found for axis in spec.axes]
    named = {a.name for a in axes if a.kind is AxisKind.NAMED and a.name}
    variadic = {a.name for a in axes if a.kind is AxisKind.VARIADIC and a.name}
    return frozenset(named & variadic)


def _resolve_hints(
    fn: Callable[..., Any], function: str, localns: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The type hints of ``fn``, resolved in its module and ``localns``.

    A name that is not defined (yet) is an :class:`UnresolvedHintError` (a NameError, so
    that the decorator can retry at the first call).
    """
    try:
        return typing.get_type_hints(fn, localns=dict(localns or {}), include_extras=True)
    except NameError as exc:
        if compiling_leniently() and not is_decorating():
            return _resolvable_hints(fn, function, localns)
        raise UnresolvedHintError.at(
            f"{function}()", f"cannot resolve its type hints ({exc})"
        ) from None
    except Exception as exc:
        if compiling_leniently():
            return _resolvable_hints(fn, function, localns)
        raise SpecError.at(f"{function}()", f"cannot resolve its type hints ({exc})") from None


def _bounded(fn: Callable[..., Any], function: str, hints: dict[str, Any]) -> dict[str, Any]:
    """The hints with their type variables replaced by their bounds (see :mod:`.typevars`);
    a bound naming a class not defined yet is an :class:`UnresolvedHintError`, as a hint
    naming one is, or leaves the variable to beartype in a lenient function called once."""
    module = getattr(fn, "__globals__", None) or {}
    try:
        return {name: with_bounds(hint, module) for name, hint in hints.items()}
    except NameError as exc:
        if compiling_leniently() and not is_decorating():
            return hints
        raise UnresolvedHintError.at(
            f"{function}()", f"cannot resolve its type hints ({exc})"
        ) from None


def _resolvable_hints(
    fn: Callable[..., Any], function: str, localns: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The hints of ``fn`` that resolve, one by one; the others are noted and left out."""
    annotations: dict[str, Any] = dict(getattr(fn, "__annotations__", None) or {})
    found: dict[str, Any] = {}
    for name, annotation in annotations.items():
        alone = _with_annotations(fn, {name: annotation})
        try:
            found.update(
                typing.get_type_hints(alone, localns=dict(localns or {}), include_extras=True)
            )
        except Exception as exc:
            what = "its return hint" if name == "return" else f"the hint of '{name}'"
            note(f"{function}() ({place(fn)}): {what} is not checked: {exc}")
    return found


def _with_annotations(fn: Callable[..., Any], annotations: dict[str, Any]) -> Any:
    """A function with the code, globals and defaults of ``fn`` and these annotations."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return types.SimpleNamespace(__annotations__=annotations)
    copy = types.FunctionType(
        code,
        typing.cast(Any, fn).__globals__,
        code.co_name,
        getattr(fn, "__defaults__", None),
        getattr(fn, "__closure__", None),
    )
    copy.__kwdefaults__ = getattr(fn, "__kwdefaults__", None)
    copy.__annotations__ = annotations
    return copy


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def defining_frames(limit: int = 8) -> list[types.FrameType]:
    """The frames of the functions (and class bodies) that are defining a decorated
    function, innermost first, and its module's: where its local names live."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
    found: list[types.FrameType] = []
    while frame is not None and len(found) < limit:
        found.append(frame)
        if frame.f_code.co_name == "<module>":  # (its globals may not be fn's: exec, doctest)
            break
        frame = frame.f_back  # type: ignore[assignment]
    return found


def frame_locals(frames: list[types.FrameType]) -> dict[str, Any]:
    """The names those frames define now (inner frames first)."""
    names: dict[str, Any] = {}
    for frame in reversed(frames):
        names.update(frame.f_locals)
    return names


def _names_tuples(hint: Any) -> bool:
    """Whether ``hint`` is a tuple type, or a union of them (what a ``*args`` hint that
    means the whole tuple looks like)."""
    if _is_union(hint):
        options = [o for o in typing.get_args(hint) if o is not type(None)]
        return bool(options) and all(_names_tuples(o) for o in options)
    return hint is tuple or typing.get_origin(hint) is tuple


def _with_line(error: ContractError, line: str) -> ContractError:
    """``error`` with one more line, of the same class and attributes."""
    return type(error)(
        f"{error}\n  {line}",
        function=error.function,
        argument=error.argument,
        dim=error.dim,
        expected=error.expected,
        actual=error.actual,
        bindings=error.bindings,
    )


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def compile_contract(
    fn: Callable[..., Any],
    function_name: str | None = None,
    *,
    localns: Mapping[str, Any] | None = None,
) -> Contract:
    """Compile the contract of ``fn`` (raises :class:`SpecError` for a bad annotation).

    ``localns``: names that string annotations may use besides the module's (the locals
    of the function that defined ``fn``). A lenient function (see
    :mod:`typedflops.contract.unchecked`) is never refused: what cannot be compiled is
    noted and left unchecked.
    """
    name = function_name or display_name(fn)
    if not is_lenient(fn):
        return Contract(fn, name, localns=localns)
    # The import hook decorates module- and class-level functions only: their hints are
    # resolved in their module, as typing.get_type_hints does (a class body's names, such
    # as a method called `float`, are not the hints' names).
    localns = None
    with lenient_compilation():
        try:
            return Contract(fn, name, localns=localns)
        except UnresolvedHintError:
            raise  # (only while decorating: a class defined later, compiled at the first call)
        except SpecError as exc:
            note(f"{name}() ({place(fn)}) is not checked: {exc}")
            return Contract(_with_annotations(fn, {}), name)
