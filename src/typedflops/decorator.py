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
from jaxtyping import Shaped

from . import config
from .annotation import ELLIPSIS, AxisKind, TensorSpec, is_tensor_annotation, tensor_spec
from .contract import Contract, compile_contract
from .cost import Cost
from .dry_run import dims_for_estimate, meta_arguments, probe_sizes
from .errors import ContractError, DeviceError, SpecError
from .expr import parse_expression
from .recording import Node, current_node, recording, spec_symbols
from .scope import CallState, call_scope, current_call, display_name, violation

__all__ = ["TypedFunction", "add_call_observer", "call_cost", "current_call", "typed_flops"]

P = ParamSpec("P")
R = TypeVar("R")

_checks_off = config._disabled
# Dynamo folds this to True while it traces; eagerly it is a plain `return False` (25 ns).
_is_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)


# Called after every checked call that passed (arguments and return): the pytest plugin's
# report counts calls this way. Empty on the hot path unless someone observes.
CallObserver = Callable[["TypedFunction[Any, Any]", tuple[Any, ...], CallState], None]
_observers: list[CallObserver] = []


def add_call_observer(observer: CallObserver) -> Callable[[], None]:
    """Call ``observer(function, args, state)`` after each checked call that passed.

    ``state.sizes`` holds the dims the call bound (arguments and return). Returns a
    function that removes the observer.
    """
    _observers.append(observer)
    return lambda: _observers.remove(observer)


def _notify(function: TypedFunction[Any, Any], args: tuple[Any, ...], state: CallState) -> None:
    for observer in tuple(_observers):
        observer(function, args, state)


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
        self._last_sizes: dict[str, int | tuple[int, ...]] | None = None
        self._formula_cache: dict[tuple[tuple[str, Any], ...], sympy.Expr] = {}
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
        state = self._check_arguments(args, kwargs)
        if self._is_async:
            return self._call_async(args, kwargs, state)  # type: ignore[return-value]
        token = call_scope.set(state)
        try:
            parent = current_node()
            if parent is None:
                result = self._fn(*args, **kwargs)
                self._check_return(result, state)
            else:
                result = self._call_recorded(parent, args, kwargs, state)
        finally:
            call_scope.reset(token)
        self._last_sizes = state.sizes
        if _observers:
            _notify(self, args, state)
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
            result = await coroutine
        finally:
            call_scope.reset(token)
        self._check_return(result, state)
        if _observers:
            _notify(self, args, state)
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

    def _call_recorded(
        self, parent: Node, args: tuple[Any, ...], kwargs: Mapping[str, Any], state: CallState
    ) -> R:
        node = Node(self.name, parent)
        node.bind_dims(state.sizes)
        passed = self._tensor_arguments(args, kwargs)
        if self.contract.takes_self and args:
            passed += _module_tensors(args[0])
        for tensor, spec in passed:
            node.enter_tensor(tensor, spec)
        with recording(node):
            result = self._fn(*args, **kwargs)
        self._check_return(result, state)
        node.bind_dims(state.sizes)  # again: the return value may have bound new dims
        mapping = node.renaming(parent, passed)
        parent.absorb(node, mapping)
        return_specs = self.contract.specs.get("return", [])
        if isinstance(result, torch.Tensor) and len(return_specs) == 1:
            own = spec_symbols(return_specs[0], tuple(result.shape))
            parent.set_shape_symbols(result, (sympy.sympify(t).xreplace(mapping) for t in own))
        return result

    def _tensor_arguments(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> list[tuple[torch.Tensor, TensorSpec]]:
        found = []
        for param in self.contract.parameters:
            if not is_tensor_annotation(param.hint):
                continue
            if param.index is not None and param.index < len(args):
                value = args[param.index]
            else:
                value = kwargs.get(param.name)
            if isinstance(value, torch.Tensor):
                found.append((value, tensor_spec(param.hint)))
        return found

    # -- costs --------------------------------------------------------------------------

    def estimate(
        self,
        *args: Any,
        dtype: torch.dtype | None = None,
        grad: tuple[str, ...] | list[str] = (),
        **dims: int | tuple[int, ...],
    ) -> Cost:
        """The cost of one call at the given dim sizes, from a dry run on ``meta`` tensors.

        Tensors are built from the annotations (nothing is allocated); ``grad`` names the
        parameters whose tensors require grad; ``dtype`` overrides the floating dtype.
        Positional ``args`` fill the leading parameters (e.g. a module for ``self``);
        a keyword that names a non-tensor parameter is passed to it.
        Missing or unknown dim names raise :class:`SpecError`.
        """
        return self._estimate(args, dims, dtype, tuple(grad))

    def _estimate(
        self,
        args: tuple[Any, ...],
        dims: Mapping[str, int | tuple[int, ...]],
        dtype: torch.dtype | None,
        grad: tuple[str, ...],
    ) -> Cost:
        contract = self.contract
        module_dims = _module_dims(args[0]) if contract.takes_self and args else {}
        sizes, passthrough = dims_for_estimate(self.name, contract, dims, module_dims)
        call_args, call_kwargs = meta_arguments(
            self.name, contract, args, sizes, passthrough, dtype, grad
        )
        if args and isinstance(args[0], torch.nn.Module):
            # A module's own parameters get meta copies too (they may be real tensors).
            from .dry_run import dry_run_call

            return dry_run_call(types.MethodType(self, args[0]), call_args[1:], call_kwargs)
        return self._dry_run(call_args, call_kwargs)

    def _dry_run(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Cost:
        session = Node("<estimate>", None, session=True)
        with config.disabled(False), recording(session):
            self(*args, **kwargs)
        (call,) = session.children
        return call.cost()

    @property
    def formula(self) -> sympy.Expr:
        """Forward FLOPs as a sympy expression in the annotation's dim names.

        From ``flops=`` when given; otherwise from a dry run at the sizes of the last call
        or estimate, or at probe sizes when there was none.
        """
        if self._flops is not None:
            return self._flops.sympy
        sizes = self._last_sizes
        probing = sizes is None
        if sizes is None:
            sizes = probe_sizes(self.contract)
        key = tuple(sorted(sizes.items()))
        if key not in self._formula_cache:
            try:
                cost = self._estimate((), sizes, None, ())
            except Exception as exc:
                if not probing:
                    raise
                shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
                reason = str(exc).splitlines()[0]
                raise SpecError(
                    f"{self.name}(): cannot derive its formula by a dry run at probe sizes "
                    f"{shown} ({type(exc).__name__}: {reason}); call {self.name}.estimate(...) "
                    "with sizes the body accepts first, or pass flops= to @typed_flops"
                ) from None
            self._formula_cache[key] = cost.formula
        return self._formula_cache[key]

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


def _module_tensors(obj: Any) -> list[tuple[torch.Tensor, TensorSpec]]:
    """A module's own tensors with their dims (``typedflops_tensors()``), e.g. its weights.

    Their dims name the module's sizes in formulas, and rename a submodule's dims into
    its parent's when both list the same tensor.
    """
    tensors = getattr(obj, "typedflops_tensors", None)
    if not callable(tensors):
        return []
    return [(tensor, tensor_spec(Shaped[torch.Tensor, dim_str])) for tensor, dim_str in tensors()]


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
    """The cost of ``fn(*args, **kwargs)`` from a dry run on meta copies of the arguments.

    For a ``@typed_flops`` function the contract is checked on the real arguments first
    (raising before anything runs). Module parameters are replaced by meta copies too.
    """
    from .dry_run import dry_run_call

    owner: Any = None
    target: Any = fn
    if isinstance(fn, types.MethodType):
        owner, target = fn.__self__, fn.__func__
    elif isinstance(fn, torch.nn.Module):
        owner, target = fn, type(fn).forward
    if isinstance(target, TypedFunction):
        state = target._check_arguments((owner, *args) if owner is not None else args, kwargs)
        if isinstance(owner, torch.nn.Module):
            _check_module_device(target.name, owner, state)
    return dry_run_call(fn, args, kwargs)
