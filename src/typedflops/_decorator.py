"""``@typed_flops``: a function's jaxtyping contract, enforced per call, and its cost model.

The contract is compiled once, at decoration. A call checks its arguments in one pass,
runs the body, then checks the return value. Nothing is recorded unless a ``record()``
block, an ``estimate()`` or a formula derivation is running, so the checked call stays a
few microseconds over a plain one.
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
from typing import Any, Generic, ParamSpec, TypeVar

import sympy
import torch

from ._annotation import ELLIPSIS, AxisKind
from ._bench import benchmark
from ._bound import TypedMethod
from ._config import DISABLED_BY_ENVIRONMENT, disabled_flag
from ._contract import (
    COROUTINE,
    FUNCTION,
    GENERATOR,
    Contract,
    compile_contract,
    defining_frames,
    frame_locals,
    function_kind,
)
from ._cost import Cost
from ._engine.calls import begin_call
from ._engine.dryrun import Probe, measure
from ._engine.frames import Frame, current_frame
from ._engine.module_sizes import held_dims
from ._engine.probes import call_dims, call_probe, estimate_probe, method_needs_object
from ._engine.session import RunSession
from ._expr import parse_expression
from ._generators import checked_async_generator, checked_generator
from ._memo import reads_memo, with_memo
from ._scope import CallState, Size, call_scope, current_call, display_name, violation
from .errors import ContractError, DeviceError, SpecError

__all__ = ["TypedFunction", "TypedMethod", "add_call_observer", "current_call"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T", bound=type)

_checks_off = disabled_flag
# Dynamo folds this to True while it traces; eagerly it is a plain `return False` (25 ns).
_is_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)


# Called after every checked call that passed (arguments and return): the pytest plugin's
# report counts calls this way. Empty on the hot path unless someone observes.
CallObserver = Callable[
    ["TypedFunction[Any, Any]", tuple[Any, ...], Mapping[str, Any], CallState], None
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


def _notify(
    function: TypedFunction[Any, Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    state: CallState,
) -> None:
    frame = current_frame()
    if frame is not None and isinstance(frame.session, RunSession):
        return  # a dry run's call, not the user's
    for observer in tuple(_observers):
        observer(function, args, kwargs, state)


# Nested checked calls up to this depth run as they are; deeper ones (recursion) raise the
# interpreter's recursion limit by the frames a checked call adds (the call of the object
# and __call__), while they run: a decorated recursive function goes as deep as a plain one.
_SHALLOW = 8
_OWN_FRAMES = 2
_NO_PARENT = contextvars.Token.MISSING


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


class TypedFunction(Generic[P, R]):
    """A function with a checked jaxtyping contract and a cost model (see :func:`typed_flops`).

    Calling it checks the call; ``formula``, ``estimate`` and ``benchmark`` give its cost.
    """

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
        self._last_estimate: dict[str, Any] | None = None
        self._formula: sympy.Expr | None = None
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
        known = contract.dim_names()
        if any(
            axis.kind is AxisKind.ANONYMOUS_VARIADIC
            for specs in contract.specs.values()
            for spec in specs
            for axis in spec.axes
        ):
            known.add(ELLIPSIS)  # an anonymous "..." is the symbol `ellipsis` in formulas
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
        return isinstance(self, _UncheckedFunction)

    @__no_type_check__.setter
    def __no_type_check__(self, value: bool) -> None:
        # A change of class, not a flag: the checked call path tests nothing for it.
        if value and not isinstance(self, _UncheckedFunction):
            self.__dict__["_checked_class"] = type(self)
            self.__class__ = _UncheckedFunction
        elif not value and isinstance(self, _UncheckedFunction):
            self.__class__ = self.__dict__.pop("_checked_class")

    # -- calling ------------------------------------------------------------------------

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        if _is_compiling():
            # dynamo builds partials of objects it traces (it cannot build our class)
            return functools.partial(self, instance)
        return TypedMethod(self, instance)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        # is_compiling() first: dynamo folds it to a constant, and it cannot trace the
        # ContextVar behind `disabled()`.
        if _is_compiling():
            return self._call_compiled(args, kwargs)
        if _checks_off.get():
            return self._fn(*args, **kwargs)
        frame = current_frame()
        if frame is not None:
            return self._call_counted(frame, args, kwargs)
        # (_check_arguments and _check_return, inlined: this is the hot path)
        contract = self._contract or self.contract
        state = CallState(self.name)
        try:
            if contract.takes_self and args:
                _bind_module_dims(args[0], state)
            contract.check_arguments(args, kwargs, state)
        except ContractError as exc:
            raise exc.with_traceback(None) from None
        if self._deferred:
            return self._call_deferred(args, kwargs, state)  # type: ignore[no-any-return]
        token = call_scope.set(state)
        parent = token.old_value
        deep = False
        if parent is not None and parent is not _NO_PARENT:
            state.depth = parent.depth + 1
            if state.depth > _SHALLOW:
                deep = True  # recursion: this call's own frames do not count against it
                sys.setrecursionlimit(sys.getrecursionlimit() + _OWN_FRAMES)
        try:
            result = self._body(*args, **kwargs)
            try:
                contract.check_return(result, state)
            except ContractError as exc:
                raise exc.with_traceback(None) from None
        finally:
            call_scope.reset(token)
            if deep:
                sys.setrecursionlimit(sys.getrecursionlimit() - _OWN_FRAMES)
        if _observers:
            _notify(self, args, kwargs, state)
        return result

    def _call_counted(self, frame: Frame, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> R:
        # While a session counts: typedflops' own work (checks, bookkeeping) runs with the
        # torch-function modes off, so that only the body's ops are seen.
        with torch._C.DisableTorchFunction():
            state = self._check_arguments(args, kwargs)
            if self._deferred:
                return self._call_deferred(args, kwargs, state)  # type: ignore[no-any-return]
            handle = begin_call(frame, self, args, kwargs)
        token = call_scope.set(state)
        try:
            with handle.scope():
                if handle.shortcut is None:
                    result = self._body(*args, **kwargs)
                else:
                    result = handle.stand_in(args, kwargs)
            with torch._C.DisableTorchFunction():
                self._check_return(result, state)
                handle.finish(state.sizes, result)
        finally:
            call_scope.reset(token)
        if _observers:
            _notify(self, args, kwargs, state)
        return result

    def _check_arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> CallState:
        contract = self.contract
        state = CallState(self.name)
        try:
            if contract.takes_self and args:
                _bind_module_dims(args[0], state)
            contract.check_arguments(args, kwargs, state)
        except ContractError as exc:
            raise exc.with_traceback(None) from None
        return state

    def _check_return(self, result: Any, state: CallState) -> None:
        try:
            self.contract.check_return(result, state)
        except ContractError as exc:
            raise exc.with_traceback(None) from None

    def _call_deferred(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], state: CallState
    ) -> Any:
        if self._kind == COROUTINE:
            return self._call_async(args, kwargs, state)
        body: Any = self._fn(*args, **kwargs)
        if self._kind == GENERATOR:
            return checked_generator(body, self.contract, state)
        return checked_async_generator(body, self.contract, state)

    async def _call_async(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], state: CallState
    ) -> Any:
        # The coroutine runs in its task's own context: the call's scope does not leak.
        token = call_scope.set(state)
        try:
            coroutine: Coroutine[Any, Any, Any] = self._fn(*args, **kwargs)  # type: ignore[assignment]
            frame = current_frame()
            if frame is None:
                result = await coroutine
            else:
                result = await _counted_coroutine(frame, self, args, kwargs, state, coroutine)
        finally:
            call_scope.reset(token)
        self._check_return(result, state)
        if _observers:
            _notify(self, args, kwargs, state)
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
                _bind_module_dims(args[0], state)
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

    # -- costs --------------------------------------------------------------------------

    @property
    def declared(self) -> sympy.Expr | None:
        """The ``flops=`` formula, which replaces the count of the body's forward ops."""
        return None if self._flops is None else self._flops.sympy

    def call_dims(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], bound: Mapping[str, Size]
    ) -> dict[str, Size]:
        """The dims of a call that ran: those it bound, ``...`` and a module's own sizes."""
        return call_dims(self.contract, args, kwargs, bound)

    def probe_call(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], bound: Mapping[str, Size]
    ) -> Probe:
        """A probe that rebuilds this call (its tensors' shapes) at other sizes of its dims."""
        probe = call_probe(self, self.name, self.contract, args, kwargs, bound)
        probe.declared = self.declared
        return probe

    def estimate(
        self,
        *args: Any,
        dtype: torch.dtype | None = None,
        grad: tuple[str, ...] | list[str] = (),
        **dims: Any,
    ) -> Cost:
        """The cost of one call at the given dim sizes, from dry runs on fake tensors.

        Tensors are built from the annotations (nothing is allocated): each named dim's
        size, ``*name`` dims and ``ellipsis=`` (for ``...``) as an int or a tuple of sizes.
        ``grad`` names the parameters whose tensors require grad (a module's parameters
        follow their ``requires_grad``); ``dtype`` overrides the floating dtype. Positional
        ``args`` fill the leading parameters (a module for ``self``); a keyword naming a
        non-tensor parameter is passed to it. An Optional tensor parameter whose default is
        None stays None unless a dim only it uses is given. Missing, unknown or bad sizes
        raise :class:`SpecError`.

        The formulas are fitted from dry runs at other sizes and checked (see
        :attr:`Cost.exact`); ``flops=`` replaces the forward count.
        """
        probe = estimate_probe(self, self.name, self.contract, args, dims, dtype, tuple(grad))
        probe.declared = self.declared
        cost = measure(probe)
        if not args:  # a method's estimate depends on its object: not kept
            self._last_estimate = dims
        return cost

    @property
    def formula(self) -> sympy.Expr:
        """Forward FLOPs as a sympy expression in the annotation's dim names.

        From ``flops=`` when given; otherwise fitted from dry runs at probe sizes (or, when
        the body cannot take those, at the sizes of the last ``estimate``). It is the same
        at any sizes unless the body branches on sizes.
        """
        if self._flops is not None:
            return self._flops.sympy
        if self._formula is None:
            self._formula = self._derive_formula()
        return self._formula

    def formula_of(self, obj: Any) -> sympy.Expr:
        """A method's forward FLOPs on ``obj`` (what ``obj.method.formula`` gives), fitted at
        probe sizes for the dims that ``obj`` does not hold."""
        if self._flops is not None:
            return self._flops.sympy
        return self._derive_formula((obj,))

    def _derive_formula(self, objects: tuple[Any, ...] = ()) -> sympy.Expr:
        contract = self.contract
        if contract.takes_self and not objects:
            raise method_needs_object(self.name)
        held = held_dims(objects[0]) if objects else {}
        sizes = {k: v for k, v in probe_sizes(contract).items() if k not in held}
        try:
            return self.estimate(*objects, **sizes).formula
        except Exception as exc:
            if self._last_estimate is not None:
                return self.estimate(*objects, **self._last_estimate).formula
            shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
            reason = str(exc).splitlines()[0]
            raise SpecError.at(
                f"{self.name}()",
                f"cannot derive its formula by a dry run at probe sizes {shown} "
                f"({type(exc).__name__}: {reason})",
                hint=f"call {self.name}.estimate(...) with sizes the body accepts first, or "
                "pass flops= to @typed_flops",
            ) from None

    def check_call(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> CallState:
        """Check a call's contract without running it (a module's parameters must be on the
        arguments' device too); the dims it binds are in the returned state."""
        state = self._check_arguments(args, kwargs)
        owner = args[0] if args and self.contract.takes_self else None
        if isinstance(owner, torch.nn.Module):
            _check_module_device(self.name, owner, state)
        return state

    def benchmark(self, *args: Any, **kwargs: Any) -> Any:
        """Time calls of this function: the same as ``typedflops.benchmark(self, ...)``."""
        return benchmark(self, *args, **kwargs)

    def __reduce__(self) -> str:
        # By reference, as functions pickle: the name this object has in its module (a
        # method's ``Class.name``). Spawned worker processes import it from there.
        return self.__qualname__

    def __repr__(self) -> str:
        return f"<typed_flops {self.name}{self.contract.signature}>"


class _UncheckedFunction(TypedFunction[P, R]):
    """A :class:`TypedFunction` marked ``@typing.no_type_check``: calls run unchecked."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._fn(*args, **kwargs)


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


def _mark_coroutine_function(function: TypedFunction[Any, Any]) -> None:
    """Let ``inspect``/``asyncio.iscoroutinefunction`` see that calling it gives a coroutine."""
    mark = getattr(inspect, "markcoroutinefunction", None)  # Python >= 3.12
    if mark is not None:
        mark(function)
    else:
        import asyncio.coroutines

        function._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]


def _module_dims(obj: Any) -> Mapping[str, int]:
    """A module's own sizes (``typedflops_dims()``), or none."""
    dims = getattr(obj, "typedflops_dims", None)
    return dims() if callable(dims) else {}


def _bind_module_dims(obj: Any, state: CallState) -> None:
    """A module's own sizes are part of its forward's contract, bound before the arguments."""
    for name, size in _module_dims(obj).items():
        state.bind(name, size, f"module {type(obj).__name__}")


# Sizes for a formula when no sizes are given: distinct multiples of 24, so that the
# usual splits (heads of 2, 3, 4, 6, 8 or 12) divide them and no two dims coincide.
_PROBE_SIZES = tuple(24 * k for k in range(1, 40))


def probe_sizes(contract: Contract) -> dict[str, Any]:
    """Sizes for every dim the required tensor parameters bind (``...`` and ``*name``: one
    axis)."""
    sizes: dict[str, Any] = {}
    parameters = [p for p in contract.tensor_parameters() if not p.defaults_to_none]
    names: list[str] = []
    variadic: set[str] = set()
    for p in parameters:
        names.extend(p.spec.bindable_names)
        variadic.update(p.spec.variadic_names)
        if p.spec.has_ellipsis:
            names.append(ELLIPSIS)
            variadic.add(ELLIPSIS)
    for name, size in zip(dict.fromkeys(names), _PROBE_SIZES, strict=False):
        sizes[name] = (size,) if name in variadic else size
    return sizes


async def _counted_coroutine(
    frame: Any,
    function: TypedFunction[Any, Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    state: CallState,
    coroutine: Coroutine[Any, Any, Any],
) -> Any:
    """Await a decorated coroutine's body as one counted call."""
    handle = begin_call(frame, function, args, kwargs, cached=False)
    with handle.scope():
        result = await coroutine
    handle.finish(state.sizes)
    return result
