"""``@typed_flops``: a function's jaxtyping contract, enforced per call, and its cost model.

The contract is compiled once, at decoration. A call checks its arguments in one pass,
runs the body, then checks the return value. Nothing is recorded unless a ``record()``
block, an ``estimate()`` or a formula derivation is running, so the checked call stays a
few microseconds over a plain one.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, overload

import sympy
import torch

from . import config
from ._engine.calls import begin_call
from ._engine.dryrun import Probe, measure
from ._engine.frames import Frame, current_frame
from ._engine.probes import call_dims, call_probe, estimate_probe
from ._engine.session import RunSession
from .annotation import ELLIPSIS, AxisKind
from .contract import Contract, compile_contract
from .cost import Cost
from .errors import ContractError, DeviceError, SpecError
from .expr import parse_expression
from .scope import CallState, Size, call_scope, current_call, display_name, violation

__all__ = ["TypedFunction", "add_call_observer", "call_cost", "current_call", "typed_flops"]

P = ParamSpec("P")
R = TypeVar("R")

_checks_off = config._disabled
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
        self._is_async = inspect.iscoroutinefunction(fn)
        if self._is_async:
            _mark_coroutine_function(self)
        self._contract: Contract | None = None
        self._last_estimate: dict[str, Any] | None = None
        self._formula: sympy.Expr | None = None
        self._flops = None if flops is None else parse_expression(flops, origin="flops=")
        # A forward reference not defined yet (NameError): compile at the first call.
        with contextlib.suppress(NameError):
            self._contract = compile_contract(fn, self.name)
        if self._flops is not None and self._contract is not None:
            self._check_formula_names(self._contract)

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
            raise SpecError(
                f"{self.name}(): flops={self._flops.text!r} names "
                f"{', '.join(unknown)}, which no annotation of {self.name} binds "
                f"(its dims: {shown})"
            )

    @property
    def contract(self) -> Contract:
        """The compiled contract (compiled at decoration, or at first use for forward refs)."""
        if self._contract is None:
            self._contract = compile_contract(self._fn, self.name)
            if self._flops is not None:
                self._check_formula_names(self._contract)
        return self._contract

    # -- calling ------------------------------------------------------------------------

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        # A plain bound method, created in C: methods and nn.Module.forward stay cheap.
        return self if instance is None else types.MethodType(self, instance)

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
        state = self._check_arguments(args, kwargs)
        if self._is_async:
            return self._call_async(args, kwargs, state)  # type: ignore[return-value]
        token = call_scope.set(state)
        try:
            result = self._fn(*args, **kwargs)
            self._check_return(result, state)
        finally:
            call_scope.reset(token)
        if _observers:
            _notify(self, args, kwargs, state)
        return result

    def _call_counted(self, frame: Frame, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> R:
        # While a session counts: typedflops' own work (checks, bookkeeping) runs with the
        # torch-function modes off, so that only the body's ops are seen.
        with torch._C.DisableTorchFunction():
            state = self._check_arguments(args, kwargs)
            if self._is_async:
                return self._call_async(args, kwargs, state)  # type: ignore[return-value]
            handle = begin_call(frame, self, args, kwargs)
        token = call_scope.set(state)
        try:
            with handle.scope():
                if handle.shortcut is None:
                    result = self._fn(*args, **kwargs)
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
        if config.DISABLED_BY_ENVIRONMENT:
            return self._fn(*args, **kwargs)
        state = self._check_arguments(args, kwargs)
        result = self._fn(*args, **kwargs)
        self._check_return(result, state)
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

    def _derive_formula(self) -> sympy.Expr:
        contract = self.contract
        if contract.takes_self:
            raise SpecError(
                f"{self.name}.estimate(): a method needs its object first, e.g. "
                f"{self.name}.estimate(obj, ...) (or model.estimate(...) for typedflops.nn "
                "models); its formula is only known through such an estimate"
            )
        sizes = probe_sizes(contract)
        try:
            return self.estimate(**sizes).formula
        except Exception as exc:
            if self._last_estimate is not None:
                return self.estimate(**self._last_estimate).formula
            shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
            reason = str(exc).splitlines()[0]
            raise SpecError(
                f"{self.name}(): cannot derive its formula by a dry run at probe sizes "
                f"{shown} ({type(exc).__name__}: {reason}); call {self.name}.estimate(...) "
                "with sizes the body accepts first, or pass flops= to @typed_flops"
            ) from None

    def benchmark(self, *args: Any, **kwargs: Any) -> Any:
        """Time calls of this function: the same as ``typedflops.benchmark(self, ...)``."""
        from .bench import benchmark

        return benchmark(self, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<typed_flops {self.name}{self.contract.signature}>"


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


@overload
def typed_flops(fn: Callable[P, R], /) -> TypedFunction[P, R]: ...


@overload
def typed_flops(
    *, flops: str | None = None, name: str | None = None
) -> Callable[[Callable[P, R]], TypedFunction[P, R]]: ...


def typed_flops(
    fn: Callable[P, R] | None = None, /, *, flops: str | None = None, name: str | None = None
) -> TypedFunction[P, R] | Callable[[Callable[P, R]], TypedFunction[P, R]]:
    """Check a function's jaxtyping contract on every call and give it a cost model.

    Bare (``@typed_flops``) or with options (``@typed_flops(flops="2*m*n*k", name="mm")``).
    Each call checks every parameter and the return value (shapes, dtypes, one device;
    other hints with beartype's semantics) before the body runs. ``f.formula``,
    ``f.estimate(**dims)`` and ``f.benchmark(*args)`` give its FLOPs, bytes and time.

    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> @typed_flops
    ... def linear(x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
    ...            ) -> Float[Tensor, "batch d_out"]:
    ...     return x @ w
    >>> linear(torch.ones(8, 4), torch.ones(4, 3)).shape
    torch.Size([8, 3])
    >>> linear.formula
    2*batch*d_in*d_out
    """

    def decorate(function: Callable[P, R]) -> TypedFunction[P, R]:
        if isinstance(function, TypedFunction):
            return function  # already decorated: one contract, checked once
        if isinstance(function, (classmethod, staticmethod)):
            inner = TypedFunction(function.__func__, flops=flops, name=name)
            return type(function)(inner)  # type: ignore[return-value]
        return TypedFunction(function, flops=flops, name=name)

    if fn is not None:
        return decorate(fn)
    return decorate


def call_cost(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Cost:
    """The cost of ``fn(*args, **kwargs)`` from dry runs on fake copies of the arguments.

    For a ``@typed_flops`` function the contract is checked on the real arguments first
    (raising before anything runs). Module parameters are replaced by fake copies too.
    """
    owner: Any = None
    target: Any = fn
    if isinstance(fn, types.MethodType):
        owner, target = fn.__self__, fn.__func__
    elif isinstance(fn, torch.nn.Module):
        owner, target = fn, type(fn).forward
    if isinstance(target, TypedFunction):
        full = (owner, *args) if owner is not None else args
        state = target._check_arguments(full, kwargs)
        if isinstance(owner, torch.nn.Module):
            _check_module_device(target.name, owner, state)
        return measure(target.probe_call(full, kwargs, state.sizes))
    return measure(_plain_probe(fn, args, kwargs))


def _plain_probe(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Probe:
    """A probe of an undecorated call: its arguments' shapes as they are (no dims)."""
    from ._engine.probes import materialize, stub

    positional = [stub(a) for a in args]
    named = {k: stub(v) for k, v in kwargs.items()}
    device = next(
        (a.device.type for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), "cpu"
    )

    def build(assignment: Mapping[str, Size], run_device: str) -> Callable[[], Any]:
        call_args = [materialize(a, run_device) for a in positional]
        call_kwargs = {k: materialize(v, run_device) for k, v in named.items()}
        return lambda: fn(*call_args, **call_kwargs)

    return Probe(function=display_name(fn), dims={}, variable=[], build=build, device=device)


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
