"""Probes: how to build a decorated call at any sizes, from its annotations or from a call.

- :func:`estimate_probe`: ``f.estimate(**dims)`` — every tensor parameter built from its
  annotation at the sizes given (an Optional one whose default is None stays None unless
  a dim only it uses is given, or it is named: ``targets=True``);
- :func:`call_probe`: a call that ran (a ``record()`` row, ``benchmark``) — its tensors'
  shapes, with the annotated axes resized.

Tensors are built on the device a dry run gives (``meta``: shapes, dtypes and
``requires_grad``, no storage). A module (``self``) takes part with such copies of its
parameters and buffers, or built again there at other sizes of its own (:mod:`.rebuild`);
a module given as another argument (``f(model, ids)``) takes part with such copies too;
an object that is not a module (a method's ``self``) with a shallow copy of itself, so
that the body's assignments to it never reach the caller's object;
and a real tensor the body reaches otherwise (a global module's weight) through a meta
copy made as the op runs (see :mod:`.counter`).
"""

from __future__ import annotations

import inspect
import operator
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...contract.annotation import ELLIPSIS, AxisKind, TensorSpec
from ...contract.compiled import TensorParameter
from ...contract.function import CheckedFunction
from ...errors import SpecError
from ...syntax.dims import with_ellipsis
from ..types import Cost
from .counter import count_custom_backwards
from .dry_modules import (
    argument_modules,
    copied_on,
    module_device,
    with_module,
    with_modules,
)
from .dryrun import Probe, Thunk, measure
from .estimate_inputs import dtype_fits, no_anonymous_axis, requested_by_name, variadic_given
from .fit import Size
from .held_sizes import held_sizes
from .kernels import meta_target
from .module_sizes import held_dims, module_dims, module_repeats
from .ragged import whole_or_ragged
from .rebuild import rebuild_of
from .state_read import read_key, torch_state
from .tensors import differentiable

__all__ = [
    "TensorStub",
    "WorkProbe",
    "call_cost",
    "call_dims",
    "call_probe",
    "check_sizes",
    "default_dtype",
    "estimate_probe",
    "method_needs_object",
    "plain_probe",
    "shape_at",
    "stub",
]

# Sizes past this are not sizes torch can index (int64), whatever the device.
_MAX_SIZE = 2**62


@dataclass(frozen=True)
class TensorStub:
    """A tensor argument of a call that ran, by its metadata (the tensor is not kept)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: str
    requires_grad: bool

    def dim(self) -> int:
        """Its number of axes."""
        return len(self.shape)


def stub(value: Any) -> Any:
    """A tensor's :class:`TensorStub` (other values, and nested tensors, as they are)."""
    if isinstance(value, torch.Tensor) and value.layout is torch.strided and not value.is_nested:
        return TensorStub(tuple(value.shape), value.dtype, value.device.type, value.requires_grad)
    if isinstance(value, list | tuple) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(stub(v) for v in value)
    if type(value) is dict and any(isinstance(v, torch.Tensor) for v in value.values()):
        return {key: stub(v) for key, v in value.items()}
    return value


def materialize(value: Any, device: str) -> Any:
    """A storage-less tensor for a stub, on ``device``, recursively in lists and tuples; a
    list, tuple, set or dict copied (what a dry run's body puts in one, ``state["h"] = h``,
    stays off the caller's)."""
    if isinstance(value, TensorStub):
        tensor = torch.empty(value.shape, dtype=value.dtype, device=device)
        return tensor.requires_grad_(value.requires_grad) if differentiable(tensor) else tensor
    if isinstance(value, torch.Tensor):
        return value
    if type(value) in (list, tuple, set):
        return type(value)(materialize(v, device) for v in value)
    if type(value) is dict:
        return {key: materialize(v, device) for key, v in value.items()}
    return value


def method_needs_object(function: str) -> SpecError:
    """The error for estimating a method with no object: its dims may come from the object."""
    return SpecError.at(
        f"{function}.estimate()",
        f"a method needs its object first, e.g. {function}.estimate(obj, ...) (or "
        "model.estimate(...) for typedflops.nn models); its formula is only known through such "
        "an estimate",
    )


def check_sizes(function: str, dims: Mapping[str, Any], variadic: set[str]) -> dict[str, Size]:
    """``estimate``'s sizes as ints (or tuples for ``*name`` dims and ``...``), or a SpecError
    naming the dim and what was given."""
    checked: dict[str, Size] = {}
    for name, value in dims.items():
        if isinstance(value, tuple | list):
            if name not in variadic:
                raise SpecError.at(
                    f"{function}.estimate()",
                    f"{name}={value!r} is a tuple, but {name} is one axis",
                    hint="give it one size (tuples are for *name dims and ellipsis=)",
                )
            checked[name] = tuple(_size(function, name, item) for item in value)
        else:
            checked[name] = _size(function, name, value)
    return checked


def _size(function: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not _is_integer(value):
        raise SpecError.at(
            f"{function}.estimate()",
            f"{name}={value!r} is not a size; sizes are integers (got {type(value).__name__})",
        )
    size = operator.index(value)
    if size < 0:
        raise SpecError.at(f"{function}.estimate()", f"{name}={size} is negative; sizes are >= 0")
    if size > _MAX_SIZE:
        raise SpecError.at(
            f"{function}.estimate()",
            f"{name}={size} is too large for a tensor size (at most 2**62)",
        )
    return size


def _is_integer(value: Any) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def shape_at(
    spec: TensorSpec, sizes: Mapping[str, Size], base: Sequence[int] | None = None
) -> tuple[int, ...]:
    """The shape an annotation gives at ``sizes`` (``base``: the shape of a call that ran,
    for the axes the annotation leaves free)."""
    axes = spec.axes
    cut = spec.variadic_index
    after = 0 if cut is None else len(axes) - cut - 1
    shape: list[int] = []
    plain = {k: v for k, v in sizes.items() if isinstance(v, int)}
    for index, axis in enumerate(axes):
        position = index if cut is None or index <= cut else -(len(axes) - index)
        old = None
        if base is not None and (cut is None or index != cut):
            old = base[position] if position >= 0 else base[len(base) + position]
        kind = axis.kind
        if kind is AxisKind.FIXED:
            assert axis.size is not None
            shape.append(axis.size)
        elif kind is AxisKind.NAMED:
            assert axis.name is not None
            if axis.broadcastable and old == 1:
                shape.append(1)
            else:
                shape.append(operator.index(sizes[axis.name]))  # type: ignore[arg-type]
        elif kind is AxisKind.SYMBOLIC:
            assert axis.expression is not None
            shape.append(int(axis.expression.evaluate(plain)))
        elif kind is AxisKind.VARIADIC:
            assert axis.name is not None
            shape.extend(_group(sizes[axis.name]))
        elif kind is AxisKind.ANONYMOUS_VARIADIC:
            if base is not None and ELLIPSIS not in sizes:
                shape.extend(base[index : len(base) - after])
            else:
                shape.extend(_group(sizes[ELLIPSIS]))
        else:
            shape.append(1 if old is None else old)
    return tuple(shape)


def _group(size: Size) -> tuple[int, ...]:
    return (size,) if isinstance(size, int) else tuple(size)


def default_dtype(spec: TensorSpec, dtype: torch.dtype | None) -> torch.dtype:
    """The dtype an input annotated ``spec`` is built with (``dtype``, where it allows it)."""
    allowed = spec.dtypes
    if allowed is None:
        return dtype or torch.float32
    if dtype is not None and dtype in allowed:
        return dtype
    for preferred in (torch.float32, torch.complex64, torch.int64, torch.bool):
        if preferred in allowed:
            return preferred
    return sorted(allowed, key=str)[0]


def _requested(parameter: TensorParameter, given: set[str], required: set[str]) -> bool:
    """An Optional tensor defaulting to None is built only when a dim only it uses is given."""
    own = set(with_ellipsis(parameter.spec.names, parameter.spec.has_ellipsis, ELLIPSIS))
    return bool(own & given) and own <= given and bool(own - required)


def estimate_probe(
    call: CheckedFunction[..., Any],
    args: tuple[Any, ...],
    dims: Mapping[str, Any],
    dtype: torch.dtype | None,
    grad: Sequence[str],
) -> Probe:
    """The probe of ``f.estimate(*args, **dims)``: tensors from the annotations at ``dims``."""
    function, contract = call.name, call.contract
    parameters = contract.tensor_parameters()
    by_name = {p.name: p for p in parameters}
    module = args[0] if args and contract.takes_self else None
    own = module_dims(module)
    variadic = {n for p in parameters for n in p.spec.variadic_names} | {ELLIPSIS}
    passthrough = {
        key: value for key, value in dims.items() if key in contract.keyword and key not in by_name
    }
    known = set(contract.dim_names()) | set(own) | {ELLIPSIS}
    # ``targets=True`` builds an Optional tensor that defaults to None from its annotation
    # (a name that is also a dim's is the dim).
    named = {key: value for key, value in dims.items() if key in by_name and key not in known}
    # ``targets=None`` leaves an Optional tensor that defaults to None as it is
    left = {key for key, value in named.items() if value is None and by_name[key].defaults_to_none}
    requested = requested_by_name(
        function, by_name, {key: value for key, value in named.items() if key not in left}
    )
    given = {
        key: value for key, value in dims.items() if key not in passthrough and key not in named
    }
    unknown = sorted(set(given) - known)
    if unknown:
        shown = ", ".join(sorted(known - {ELLIPSIS})) or "none"
        raise SpecError.at(
            f"{function}.estimate()",
            f"unknown dim{'s' * (len(unknown) > 1)} {', '.join(unknown)}; its dims are {shown}",
        )
    sizes = check_sizes(function, given, variadic)
    variadic_given(function, contract.signature, args)
    unknown_grad = sorted(set(grad) - set(by_name))
    if unknown_grad:
        which = "is not a tensor parameter" if len(unknown_grad) == 1 else "are not"
        raise SpecError.at(
            f"{function}.estimate()",
            f"grad names {', '.join(unknown_grad)}, which {which}"
            f"{' tensor parameters' if len(unknown_grad) > 1 else ''}"
            f" (tensor parameters: {', '.join(by_name) or 'none'})",
        )
    required = {p.name for p in parameters if not p.defaults_to_none}
    required_dims = {
        n
        for p in parameters
        if p.name in required
        for n in with_ellipsis(p.spec.names, p.spec.has_ellipsis, ELLIPSIS)
    }
    build_params = [
        p
        for p in parameters
        if (p.index is None or p.index >= len(args))
        and p.name not in passthrough
        and p.name not in left
        and (p.name in required or p.name in requested or _requested(p, set(sizes), required_dims))
    ]
    needed: set[str] = set()
    for p in build_params:
        no_anonymous_axis(function, p.name, p.spec)
        needed.update(with_ellipsis(p.spec.bindable_names, p.spec.has_ellipsis, ELLIPSIS))
    held = {
        name: size
        for name, size in held_dims(module).items()
        if name in needed and name not in sizes and name not in own
    }
    missing = sorted(needed - set(sizes) - set(own) - set(held))
    if missing:
        raise SpecError.at(
            f"{function}.estimate()",
            f"missing size{'s' * (len(missing) > 1)} for {', '.join(missing)}",
            hint=f"pass {', '.join(f'{m}=...' for m in missing)}"
            + (" (the axes '...' stands for: an int or a tuple)" if ELLIPSIS in missing else ""),
        )
    if dtype is not None and (dtype.is_floating_point or dtype.is_complex):
        dtype_fits(function, dtype, build_params)
    for param in contract.parameters:
        if (
            (param.index is None or param.index >= len(args))
            and param.name not in by_name
            and param.name not in passthrough
            and contract.signature.parameters[param.name].default is inspect.Parameter.empty
        ):
            if param.index == 0 and contract.takes_self:
                raise method_needs_object(function)
            raise SpecError.at(
                f"{function}.estimate()",
                f"cannot build argument '{param.name}' (not a tensor annotation)",
                hint=f"pass {param.name}=... (its value, or a list or dict of annotations)",
            )
    base: dict[str, Size] = {**own, **held, **sizes}
    device = module_device(module) or "cpu"
    repeats = module_repeats(module)
    rebuild = rebuild_of(module, {**held, **sizes})
    # Held dims are changed too: with the module's own sizes, where it can be rebuilt.
    variable = [*sizes, *held]
    if rebuild is not None and rebuild.declared:  # a count of blocks is checked apart
        variable += [n for n in own if n not in variable and n not in repeats]

    rebuilt: dict[Any, torch.nn.Module] = {}
    others = argument_modules(
        (*(args[1:] if module is not None else args), *passthrough.values()), module
    )
    if device == "cpu" and others:
        device = module_device(others[0]) or device
    if meta_target() is not None and not any(map(module_device, (module, *others))):
        # No tensor says where the call runs (a function, a module without weights): it
        # runs as the device kernels_of names, as the same call on meta tensors records.
        device = "meta"

    def build(assignment: Mapping[str, Size], run_device: str) -> Thunk:
        target, own_runner = with_module(module, rebuild, run_device, assignment, dtype, rebuilt)
        runner = with_modules(own_runner, others, run_device, dtype)
        positional = [target, *args[1:]] if module is not None else list(args)
        kwargs: dict[str, Any] = {}
        for key, value in passthrough.items():
            kwargs[key] = copied_on(run_device, value, dtype)
        for p in build_params:
            shape = shape_at(p.spec, assignment)
            tensor = torch.empty(shape, dtype=default_dtype(p.spec, dtype), device=run_device)
            if p.name in grad and differentiable(tensor):
                tensor.requires_grad_(True)
            kwargs[p.name] = tensor
        return lambda: runner(lambda: count_custom_backwards(call(*positional, **kwargs)))

    return Probe(
        function=function,
        dims=base,
        variable=variable,
        build=build,
        device=device,
        held=held_sizes(module, rebuild),
        repeats=repeats,
        declared=call.declared,
        rebuild=rebuild,
    )


def call_probe(
    call: CheckedFunction[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    bound: Mapping[str, Size],
    grad: bool = True,
) -> Probe:
    """The probe of a call that ran: its own tensors' shapes, annotated axes resized.

    ``args`` and ``kwargs`` may hold tensors or their :class:`TensorStub`; ``grad``: whether
    the call ran with grad enabled (its runs do as it did: under ``no_grad`` or
    ``inference_mode`` nothing needs a backward).
    """
    function, contract = call.name, call.contract
    module = args[0] if args and contract.takes_self else None
    positional = [stub(a) for a in args]
    named = {k: stub(v) for k, v in kwargs.items()}
    parameters = contract.tensor_parameters()
    found: dict[str, tuple[TensorSpec, TensorStub, int | None]] = {}
    for p in parameters:
        value = (
            positional[p.index]
            if p.index is not None and p.index < len(args)
            else named.get(p.name)
        )
        if isinstance(value, TensorStub):
            found[p.name] = (p.spec, value, p.index if p.name not in named else None)
    dims: dict[str, Size] = dict(bound)
    for spec, value, _ in found.values():
        if spec.has_ellipsis and ELLIPSIS not in dims:
            cut = spec.variadic_index
            assert cut is not None
            after = len(spec.axes) - cut - 1
            dims[ELLIPSIS] = tuple(value.shape[cut : len(value.shape) - after])
    in_arguments = {
        n
        for spec, _, _ in found.values()
        for n in with_ellipsis(spec.bindable_names, spec.has_ellipsis, ELLIPSIS)
    }
    own = module_dims(module)
    variable = [n for n in dims if n in in_arguments and n not in own]
    repeats = module_repeats(module)
    rebuild = rebuild_of(module, dims)
    if rebuild is not None and rebuild.declared:  # a count of blocks is checked apart
        variable += [n for n in own if n not in variable and n not in repeats]
    devices = [value.device for _, value, _ in found.values()]
    device = devices[0] if devices else module_device(module) or "cpu"
    # (a model passed as an argument, or a method's object not named self: its state on
    # meta, and what the body assigns to it put back, as for self)
    others = argument_modules(
        (*(positional[1:] if module is not None else positional), *named.values()), module
    )

    rebuilt: dict[Any, torch.nn.Module] = {}

    def build(assignment: Mapping[str, Size], run_device: str) -> Thunk:
        target, own_runner = with_module(module, rebuild, run_device, assignment, None, rebuilt)
        runner = with_modules(own_runner, others, run_device, None)
        call_args = [materialize(a, run_device) for a in positional]
        call_kwargs = {k: materialize(v, run_device) for k, v in named.items()}
        if module is not None:
            call_args[0] = target
        for name, (spec, value, index) in found.items():
            resized = shape_at(spec, assignment, value.shape)
            tensor = torch.empty(resized, dtype=value.dtype, device=run_device)
            if value.requires_grad and differentiable(tensor):
                tensor.requires_grad_(True)
            if index is not None:
                call_args[index] = tensor
            else:
                call_kwargs[name] = tensor

        def run() -> Any:
            with torch.set_grad_enabled(grad):
                return count_custom_backwards(call(*call_args, **call_kwargs))

        return lambda: runner(run)

    return Probe(
        function=function,
        dims=dims,
        variable=variable,
        build=build,
        device=device,
        held=held_sizes(module, rebuild),
        repeats=repeats,
        declared=call.declared,
        rebuild=rebuild,
    )


def call_dims(
    call: CheckedFunction[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    bound: Mapping[str, Size],
) -> dict[str, Size]:
    """The dims of a call: those it bound, ``...`` (the first one) and the module's own."""
    contract = call.contract
    dims: dict[str, Size] = dict(bound)
    module = args[0] if args and contract.takes_self else None
    for name, size in module_dims(module).items():
        dims.setdefault(name, size)
    for p in contract.tensor_parameters():
        if not p.spec.has_ellipsis or ELLIPSIS in dims:
            continue
        value = args[p.index] if p.index is not None and p.index < len(args) else kwargs.get(p.name)
        shape = getattr(value, "shape", None)
        if shape is None:
            continue
        cut = p.spec.variadic_index
        assert cut is not None
        after = len(p.spec.axes) - cut - 1
        dims[ELLIPSIS] = tuple(whole_or_ragged(s) for s in shape[cut : len(shape) - after])
    return dims


def plain_probe(
    fn: Callable[..., Any], function: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Probe:
    """A probe of an undecorated call: its arguments' shapes as they are (no dims)."""
    positional = [stub(a) for a in args]
    named = {k: stub(v) for k, v in kwargs.items()}
    device = next(
        (a.device.type for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), "cpu"
    )

    def build(assignment: Mapping[str, Size], run_device: str) -> Thunk:
        call_args = [materialize(a, run_device) for a in positional]
        call_kwargs = {k: materialize(v, run_device) for k, v in named.items()}
        return lambda: count_custom_backwards(fn(*call_args, **call_kwargs))

    return Probe(function=function, dims={}, variable=[], build=build, device=device)


def call_cost(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Cost:
    """The cost of ``fn(*args, **kwargs)`` from dry runs on meta copies of the arguments.

    For a ``@typed_flops`` function (or a method, or a module whose forward is one) the
    contract is checked on the real arguments first, raising before anything runs.
    """
    owner: Any = getattr(fn, "__self__", None)
    target: Any = getattr(fn, "__func__", fn)
    if isinstance(fn, torch.nn.Module):
        owner, target = fn, type(fn).forward
    if isinstance(target, CheckedFunction):
        full = (owner, *args) if owner is not None else args
        state = target.check_call(full, kwargs)
        return measure(call_probe(target, full, kwargs, state.sizes))
    name = str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn)))
    return measure(plain_probe(fn, name, args, kwargs))


class WorkProbe:
    """A work's probe, built when the work is made (it keeps shapes, not tensors, and its
    module by a weak reference) and handed out when a fit asks for it."""

    __slots__ = ("bound", "function", "grad", "module", "named", "read", "shapes", "torch")

    def __init__(
        self,
        function: CheckedFunction[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        bound: Mapping[str, Size],
        grad: bool,
    ) -> None:
        module = args[0] if args and isinstance(args[0], torch.nn.Module) else None
        self.function = function
        self.module = weakref.ref(module) if module is not None else None
        self.shapes = tuple(stub(a) for a in (args[1:] if module is not None else args))
        self.named = {k: stub(v) for k, v in kwargs.items()}
        self.bound = dict(bound)
        self.grad = grad  # (no_grad and inference_mode: no backward, nothing saved)
        #: torch's settings and what the body reads, as the call ran (see .state_read).
        self.torch = torch_state()
        self.read = self._read(module)

    def _read(self, module: Any) -> Any:
        try:
            return read_key(self.function, module, self.shapes, self.named)
        except Exception:  # (an object that cannot be read as a key: fitted as before)
            return "unread"

    def reads_alike(self) -> bool:
        """Whether what the body reads (globals, closure, its module, its arguments'
        settings) is as it was when the call ran."""
        module = None
        if self.module is not None:
            module = self.module()
            if module is None:
                return False
        return bool(self._read(module) == self.read)

    def __call__(self) -> Probe:
        shapes = self.shapes
        if self.module is not None:
            owner = self.module()
            if owner is None:
                raise RuntimeError(f"{self.function.name}: its module no longer exists")
            shapes = (owner, *shapes)
        return call_probe(self.function, shapes, self.named, self.bound, self.grad)
