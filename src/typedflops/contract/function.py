"""The checked callable: a function's jaxtyping contract, enforced on every call.

The contract is compiled once, at decoration. A call checks its arguments in one pass,
runs the body, then checks the return value. While the cost engine counts (a ``record()``
block or a dry run), it is attached through one hook: :data:`counting_frame` holds the
innermost frame it counts into, and :func:`attach_counter` gives it the calls to count.
Nothing else of the cost model is here (see :mod:`typedflops.decorator`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import sys
import types
import warnings
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, ClassVar, Generic, ParamSpec, Protocol, TypeVar

import sympy
import torch

from ..config import DISABLED_BY_ENVIRONMENT, disabled_flag
from ..errors import ContractError, DeviceError, SpecError
from ..syntax.dims import with_ellipsis
from ..syntax.expr import parse_expression
from . import recall
from .annotation import ELLIPSIS
from .bound import TypedMethod
from .compiled import (
    COROUTINE,
    FUNCTION,
    GENERATOR,
    Contract,
    compile_contract,
    defining_frames,
    frame_locals,
    function_kind,
)
from .generators import StepCounter, checked_async_generator, checked_generator
from .memo import reads_memo, with_memo
from .scope import (
    CallState,
    bind_module_dims,
    call_scope,
    current_call,
    display_name,
    is_compiling,
    module_dims,
    violation,
)

__all__ = [
    "CallCounter",
    "CheckedFunction",
    "add_call_observer",
    "attach_counter",
    "counting_frame",
    "current_call",
    "module_dims",
    "notify_observers",
    "open_records",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T", bound=type)

# Bound once: the off switch is read on every call.
_checks_off = disabled_flag.get


class CallCounter(Protocol):
    """The cost engine's side of the hook: it runs a checked call while it counts."""

    def count_call(
        self,
        frame: Any,
        function: CheckedFunction[Any, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        """Check, run and count one call (its ops go to ``frame``'s session)."""

    def record_call(
        self,
        frame: tuple[Any, ...],
        function: CheckedFunction[Any, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> Any:
        """:meth:`count_call` where ``frame`` is a tuple (the calls of the records open)."""

    async def count_coroutine(
        self,
        frame: Any,
        function: CheckedFunction[Any, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        state: CallState,
        coroutine: Coroutine[Any, Any, Any],
    ) -> Any:
        """Await a decorated coroutine's body as one counted call."""

    def observes(self, frame: Any) -> bool:
        """Whether calls counted into ``frame`` are the user's (a dry run's are not)."""

    def frame_here(self) -> Any:
        """The frame a call made here counts into, where :data:`counting_frame` holds none
        (a context copied before a record of this thread or task opened), or None."""

    def count_generator(
        self,
        function: CheckedFunction[Any, Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        state: CallState,
    ) -> StepCounter:
        """The count of a decorated generator's call, made at its first step a record
        sees: each step's ops are its own."""


#: The innermost frame the cost engine counts into, per thread and asyncio task; None on
#: the hot path (nothing is counting). The engine sets it; the contract only reads it.
counting_frame: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "typedflops_frame", default=None
)
#: The records open on every thread (the engine keeps it): while it is empty, a call
#: whose context holds no frame is counted by nothing.
open_records: set[Any] = set()
_counters: list[CallCounter] = []
# Bound once: every checked call reads them.
_counting = counting_frame.get
_caller = call_scope.get


def _generator_counter(
    function: CheckedFunction[Any, Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    state: CallState,
) -> StepCounter | None:
    """The engine's count of a generator call stepped here, where a record counts here
    (a dry run's consumer counts its steps as its own), else None."""
    frame = _counting()
    if frame is None and open_records:
        frame = _counters[0].frame_here()
    if type(frame) is not tuple:
        return None
    return _counters[0].count_generator(function, args, kwargs, state)


def attach_counter(counter: CallCounter) -> None:
    """Give the cost engine's counter the calls made while :data:`counting_frame` is set
    (done once, when the engine is imported)."""
    _counters[:] = [counter]


# Called after every checked call that passed (arguments and return): the pytest plugin's
# report counts calls this way. Empty on the hot path unless someone observes.
CallObserver = Callable[
    ["CheckedFunction[Any, Any]", tuple[Any, ...], Mapping[str, Any], CallState], None
]
_observers: list[CallObserver] = []


def add_call_observer(observer: CallObserver) -> Callable[[], None]:
    """Call ``observer(function, args, kwargs, state)`` after each checked call that passed
    (calls made by typedflops' own dry runs are not observed).

    ``state.sizes`` holds the dims the call bound (arguments and return). Returns a
    function that removes the observer.
    """
    _observers.append(observer)
    return lambda: _observers.remove(observer)


def notify_observers(
    function: CheckedFunction[Any, Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    state: CallState,
) -> None:
    """Tell the observers of a call that passed (not when a dry run made it)."""
    if not _observers:
        return
    frame = counting_frame.get()
    if frame is not None and not _counters[0].observes(frame):
        return  # a dry run's call, not the user's
    for observer in tuple(_observers):
        observer(function, args, kwargs, state)


# Nested checked calls up to this depth run as they are; deeper ones (recursion) raise the
# interpreter's recursion limit by the frames a checked call adds (the call of the object
# and __call__), while they run: a decorated recursive function goes as deep as a plain one.
_SHALLOW = 8
_OWN_FRAMES = 2


def _warn_nothing_to_check(fn: Callable[..., Any], name: str) -> None:
    """Warn, at the line that defines ``fn``, that it has no annotation to check."""
    code = getattr(fn, "__code__", None)
    message = (
        f"typedflops: {name}() has no annotations, so @typed_flops has nothing to check and "
        'no dims to write its formula in; annotate its tensors, e.g. x: Float[Tensor, "batch d"]'
    )
    if code is None:
        warnings.warn(message, stacklevel=4)
        return
    warnings.warn_explicit(
        message,
        UserWarning,
        code.co_filename,
        code.co_firstlineno,
        module=getattr(fn, "__module__", None) or "",
    )


class CheckedFunction(Generic[P, R]):
    """A function whose jaxtyping contract is checked on every call, before its body runs.

    :class:`typedflops.TypedFunction` (what ``@typed_flops`` returns) adds its cost model.
    """

    #: What ``obj.method`` gives for a method (a subclass gives one with its costs).
    method_class: ClassVar[type[TypedMethod]] = TypedMethod
    #: True for the variant of a class whose calls are not checked (``no_type_check``).
    unchecked: ClassVar[bool] = False

    # What every call reads, in slots (an instance's dict holds what update_wrapper copies).
    __slots__ = ("__dict__", "__weakref__", "_body", "_contract", "_deferred", "_fn", "name")

    # Copied from the wrapped function by functools.update_wrapper.
    __name__: str
    __qualname__: str
    __module__: str
    __wrapped__: Callable[P, R]

    def __init__(self, fn: Callable[P, R], *, flops: str | None, name: str | None) -> None:
        functools.update_wrapper(self, fn)
        self.__wrapped__ = fn
        self._fn = fn
        self.name = name or display_name(fn)
        self._kind = function_kind(fn)
        # Coroutines and generators run their body after the call returns.
        self._deferred = self._kind != FUNCTION
        if self._kind == COROUTINE:
            _mark_coroutine_function(self)
        # The body as checked calls run it: with jaxtyping's memo holding the call's dims
        # when it reads them (isinstance, print_bindings).
        self._body: Callable[P, R] = (
            with_memo(fn) if self._kind == FUNCTION and reads_memo(fn) else fn
        )
        self._contract: Contract | None = None
        self._flops = None if flops is None else parse_expression(flops, origin="flops=")
        # A string annotation may name a class local to the function that defines `fn`
        # (resolved with its locals), or something defined later (at the first call).
        self._scopes: list[types.FrameType] = []
        try:
            self._contract = compile_contract(fn, self.name)
        except NameError:
            self._scopes = defining_frames()
            with contextlib.suppress(NameError):
                self._contract = compile_contract(fn, self.name, localns=frame_locals(self._scopes))
                self._scopes = []
        if self._flops is not None and self._contract is not None:
            self._check_formula_names(self._contract)
        if getattr(fn, "__no_type_check__", False):
            self.__no_type_check__ = True
        elif not getattr(fn, "__annotations__", None):
            _warn_nothing_to_check(fn, self.name)

    def _check_formula_names(self, contract: Contract) -> None:
        assert self._flops is not None
        # (an anonymous "..." is the symbol `ellipsis` in formulas)
        anonymous = any(spec.has_ellipsis for specs in contract.specs.values() for spec in specs)
        known = set(with_ellipsis(contract.dim_names(), anonymous, ELLIPSIS))
        unknown = sorted(self._flops.names - known)
        if unknown and not contract.takes_self:
            shown = ", ".join(sorted(known)) or "none"
            raise SpecError.at(
                f"{self.name}()",
                f"flops={self._flops.text!r} names {', '.join(unknown)}, which no annotation "
                f"of {self.name} binds (its dims: {shown})",
            )

    @property
    def contract(self) -> Contract:
        """The compiled contract (compiled at decoration, or at first use for forward refs)."""
        if self._contract is None:
            scopes, self._scopes = self._scopes, []
            self._contract = compile_contract(self._fn, self.name, localns=frame_locals(scopes))
            if self._flops is not None:
                self._check_formula_names(self._contract)
        return self._contract

    @property
    def __no_type_check__(self) -> bool:
        """Set by ``@typing.no_type_check`` (placed over or under ``@typed_flops``): calls
        are not checked."""
        return type(self).unchecked

    @__no_type_check__.setter
    def __no_type_check__(self, value: bool) -> None:
        # A change of class, not a flag: the checked call path tests nothing for it.
        if value and not type(self).unchecked:
            self.__dict__["_checked_class"] = type(self)
            self.__class__ = _unchecked_class(type(self))
        elif not value and type(self).unchecked:
            self.__class__ = self.__dict__.pop("_checked_class")

    # -- calling ------------------------------------------------------------------------

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        if is_compiling():
            # dynamo builds partials of objects it traces (it cannot build our class)
            return functools.partial(self, instance)
        return self.method_class(self, instance)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        # is_compiling() first: dynamo folds it to a constant, and it cannot trace the
        # ContextVar behind `disabled()`.
        if is_compiling():
            return self._call_compiled(args, kwargs)
        if _checks_off():
            # (without keywords, no empty dict is unpacked)
            return self._fn(*args, **kwargs) if kwargs else self._fn(*args)  # type: ignore[call-arg]
        frame = _counting()
        if frame is None and open_records:
            frame = _counters[0].frame_here()
        if frame is not None:
            if type(frame) is tuple:  # (a record's calls: one frame less)
                return _counters[0].record_call(frame, self, args, kwargs)  # type: ignore[no-any-return]
            return _counters[0].count_call(frame, self, args, kwargs)  # type: ignore[no-any-return]
        # (check_arguments and check_return, inlined, recalling earlier calls' outcomes:
        # this is the hot path)
        contract = self._contract or self.contract
        try:
            state, outcome = recall.check_arguments(contract, self.name, args, kwargs)
        except ContractError as exc:
            raise exc.with_traceback(None) from None
        if self._deferred:
            return self.call_deferred(args, kwargs, state)  # type: ignore[no-any-return]
        parent = _caller()
        deep = False
        if parent is not None:
            if outcome is not None:
                state = outcome.own_state()  # (the recalled one is shared)
            state.depth = parent.depth + 1
            if state.depth > _SHALLOW:
                deep = True  # recursion: this call's own frames do not count against it
                sys.setrecursionlimit(sys.getrecursionlimit() + _OWN_FRAMES)
        elif outcome is not None and self._body is not self._fn:
            state = outcome.own_state()  # (the body binds the dims its isinstance finds)
        token = call_scope.set(state)
        try:
            result = self._body(*args, **kwargs) if kwargs else self._body(*args)  # type: ignore[call-arg]
            try:
                state = recall.check_return(contract, result, state, outcome)
            except ContractError as exc:
                raise exc.with_traceback(None) from None
        finally:
            try:  # noqa: SIM105 (a context manager costs more, here on each call)
                call_scope.reset(token)
            except LookupError:  # (gone already: see contract.scope.call_scope)
                pass
            if deep:
                sys.setrecursionlimit(sys.getrecursionlimit() - _OWN_FRAMES)
        if _observers:
            notify_observers(self, args, kwargs, state)
        return result

    @property
    def deferred(self) -> bool:
        """Whether the body runs after the call returns (a coroutine or a generator)."""
        return self._deferred

    @property
    def body(self) -> Callable[P, R]:
        """The body as checked calls run it (with jaxtyping's memo where it reads it)."""
        return self._body

    def check_arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> CallState:
        """Check a call's arguments (a module's own sizes bound first): the call's state,
        or a :class:`ContractError` with no traceback into typedflops."""
        contract = self.contract
        state = CallState(self.name)
        try:
            if contract.takes_self and args:
                bind_module_dims(args[0], state)
            contract.check_arguments(args, kwargs, state)
        except ContractError as exc:
            raise exc.with_traceback(None) from None
        return state

    def recall_arguments(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> tuple[CallState, recall.Outcome | None]:
        """:meth:`check_arguments`, taking the bindings of an earlier call whose arguments
        read the same (see :mod:`.recall`): the call's state, and the outcome recalled
        (whose state is shared: a call that sets more on it takes ``outcome.own_state()``)."""
        try:
            return recall.check_arguments(self._contract or self.contract, self.name, args, kwargs)
        except ContractError as exc:
            raise exc.with_traceback(None) from None

    def recall_return(
        self, result: Any, state: CallState, outcome: recall.Outcome | None
    ) -> CallState:
        """:meth:`check_return` for a call checked by :meth:`recall_arguments`: the call's
        state after it (its own, if the check bound more)."""
        try:
            return recall.check_return(self._contract or self.contract, result, state, outcome)
        except ContractError as exc:
            raise exc.with_traceback(None) from None

    @property
    def binds_in_body(self) -> bool:
        """Whether its body binds dims of its own (it reads jaxtyping's memo)."""
        return self._body is not self._fn

    def check_return(self, result: Any, state: CallState) -> None:
        """Check a call's return value against its annotation, in the call's state."""
        try:
            self.contract.check_return(result, state)
        except ContractError as exc:
            raise exc.with_traceback(None) from None

    def call_deferred(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], state: CallState
    ) -> Any:
        """Start a coroutine or generator whose arguments passed: it checks the rest."""
        if self._kind == COROUTINE:
            return self._call_async(args, kwargs, state)
        body: Any = self._fn(*args, **kwargs)
        counted = functools.partial(_generator_counter, self, args, kwargs, state)
        if self._kind == GENERATOR:
            return checked_generator(body, self.contract, state, counted)
        return checked_async_generator(body, self.contract, state, counted)

    async def _call_async(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], state: CallState
    ) -> Any:
        # The coroutine runs in its task's own context: the call's scope does not leak.
        token = call_scope.set(state)
        try:
            coroutine: Coroutine[Any, Any, Any] = self._fn(*args, **kwargs)  # type: ignore[assignment]
            frame = counting_frame.get()
            if frame is None and open_records:
                frame = _counters[0].frame_here()
            if frame is None:
                result = await coroutine
            else:
                result = await _counters[0].count_coroutine(
                    frame, self, args, kwargs, state, coroutine
                )
        finally:
            try:  # noqa: SIM105 (a context manager costs more, here on each call)
                call_scope.reset(token)
            except LookupError:  # (gone already: see contract.scope.call_scope)
                pass
        self.check_return(result, state)
        if _observers:
            notify_observers(self, args, kwargs, state)
        return result

    def _call_compiled(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> R:
        # dynamo traces the checks: they read only shapes, dtypes and devices, which it
        # turns into guards, so a compiled call pays nothing for them, the graph does not
        # break (fullgraph=True works), and a call that breaks the contract raises while
        # dynamo traces it. `disabled()` lives in a ContextVar, which dynamo cannot read;
        # only TYPEDFLOPS_DISABLE=1 (read at import) switches checks off in compiled code.
        # Nothing is recorded while compiling.
        if DISABLED_BY_ENVIRONMENT:
            return self._fn(*args, **kwargs)
        contract = self.contract
        state = CallState(self.name)
        try:
            if contract.takes_self and args:
                bind_module_dims(args[0], state)
            contract.check_arguments(args, kwargs, state)
        except ContractError as exc:
            _report_to_dynamo(exc)
            raise
        result = self._fn(*args, **kwargs)
        try:
            contract.check_return(result, state)
        except ContractError as exc:
            _report_to_dynamo(exc)
            raise
        return result

    # -- what the cost model reads ------------------------------------------------------

    @property
    def declared(self) -> sympy.Expr | None:
        """The ``flops=`` formula, which replaces the count of the body's forward ops."""
        return None if self._flops is None else self._flops.sympy

    def check_call(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> CallState:
        """Check a call's contract without running it (a module's parameters must be on the
        arguments' device too); the dims it binds are in the returned state."""
        state = self.check_arguments(args, kwargs)
        owner = args[0] if args and self.contract.takes_self else None
        if isinstance(owner, torch.nn.Module):
            _check_module_device(self.name, owner, state)
        return state

    def __reduce__(self) -> str:
        # By reference, as functions pickle: the name this object has in its module (a
        # method's ``Class.name``). Spawned worker processes import it from there.
        return self.__qualname__

    def __repr__(self) -> str:
        return f"<typed_flops {self.name}{self.contract.signature}>"


_UNCHECKED: dict[type[Any], type[Any]] = {}


def _unchecked_class(cls: type[CheckedFunction[Any, Any]]) -> type[Any]:
    """The variant of ``cls`` marked ``@typing.no_type_check``: its calls run unchecked."""
    found = _UNCHECKED.get(cls)
    if found is None:

        def call_unchecked(self: CheckedFunction[Any, Any], *args: Any, **kwargs: Any) -> Any:
            return self._fn(*args, **kwargs)

        found = type(
            cls.__name__,
            (cls,),
            {
                "__call__": call_unchecked,
                "unchecked": True,
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
            },
        )
        _UNCHECKED[cls] = found
    return found


def _report_to_dynamo(error: ContractError) -> None:
    """Put a contract error's message in what dynamo reports while it traces a call.

    With ``fullgraph=True`` dynamo turns any exception raised while tracing into its own
    error, quoting ours only as a ``repr``; a graph break with our message keeps it
    readable there. Without fullgraph, the break makes dynamo run the rest of the call
    eagerly, which raises ``error`` itself.
    """
    graph_break = getattr(torch._dynamo, "graph_break", None)
    if graph_break is not None:
        graph_break(msg=error.args[0])


def _check_module_device(function: str, module: torch.nn.Module, state: CallState) -> None:
    """The arguments of a module's call must be on the device of its parameters."""
    weight = next(module.parameters(), None)
    if weight is None or state.device is None or weight.device == state.device:
        return
    raise violation(
        DeviceError,
        state,
        state.device_where,
        f"is on {state.device} but module {type(module).__name__}'s parameters are on "
        f"{weight.device}; all tensors of one call must be on one device",
        expected=weight.device,
        actual=state.device,
    )


def _mark_coroutine_function(function: CheckedFunction[Any, Any]) -> None:
    """Let ``inspect``/``asyncio.iscoroutinefunction`` see that calling it gives a coroutine."""
    mark = getattr(inspect, "markcoroutinefunction", None)  # Python >= 3.12
    if mark is not None:
        mark(function)
    else:
        import asyncio.coroutines

        function._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]
