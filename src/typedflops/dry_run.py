"""Dry runs: a decorated body executed on ``meta`` tensors to count what it would do.

``meta`` tensors carry shapes, dtypes and ``requires_grad`` but no storage, so a dry run of
the lecture's GPU-size model allocates nothing and takes milliseconds.
"""

from __future__ import annotations

import inspect
import itertools
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from . import config
from .annotation import ELLIPSIS, AxisKind, TensorSpec, is_tensor_annotation, tensor_spec
from .cost import Cost
from .errors import SpecError
from .recording import Node, recording

if TYPE_CHECKING:
    from .contract import Contract

__all__ = ["dims_for_estimate", "dry_run_call", "meta_arguments", "probe_sizes"]

Sizes = dict[str, int | tuple[int, ...]]

# Distinct primes, so that no two dims share a size and a body that splits an axis by a
# constant fails loudly (the formula then asks for `estimate(...)` at real sizes).
_PROBES = (7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83)


def _parameter_specs(contract: Contract) -> dict[str, TensorSpec]:
    """Parameters whose hint is one tensor annotation (or an Optional of one)."""
    found: dict[str, TensorSpec] = {}
    for param in contract.parameters:
        hint = param.hint
        options = [hint, *typing.get_args(hint)]
        for option in options:
            if is_tensor_annotation(option):
                found[param.name] = tensor_spec(option)
                break
    return found


def _bindable(contract: Contract) -> dict[str, AxisKind]:
    names: dict[str, AxisKind] = {}
    for spec in _parameter_specs(contract).values():
        for axis in spec.axes:
            if axis.kind in (AxisKind.NAMED, AxisKind.VARIADIC) and axis.name:
                names.setdefault(axis.name, axis.kind)
    return names


def probe_sizes(contract: Contract) -> Sizes:
    """Distinct prime sizes for every dim the parameters bind (a variadic dim gets one axis)."""
    sizes: Sizes = {}
    for (name, kind), size in zip(
        _bindable(contract).items(), itertools.cycle(_PROBES), strict=False
    ):
        sizes[name] = (size,) if kind is AxisKind.VARIADIC else size
    return sizes


def dims_for_estimate(
    function: str,
    contract: Contract,
    dims: Mapping[str, int | tuple[int, ...]],
    module_dims: Mapping[str, int],
) -> tuple[Sizes, dict[str, Any]]:
    """Split ``estimate``'s keywords into dim sizes and non-tensor arguments; check names."""
    tensor_params = _parameter_specs(contract)
    passthrough = {
        key: value
        for key, value in dims.items()
        if key in contract.keyword and key not in tensor_params
    }
    given = {key: value for key, value in dims.items() if key not in passthrough}
    known = set(contract.dim_names()) | set(module_dims) | {ELLIPSIS}
    unknown = sorted(set(given) - known)
    if unknown:
        raise SpecError(
            f"{function}.estimate(): unknown dim{'s' * (len(unknown) > 1)} "
            f"{', '.join(unknown)}; its dims are {', '.join(sorted(known - {ELLIPSIS}))}"
        )
    needed = set(_bindable(contract)) - set(module_dims)
    missing = sorted(needed - set(given))
    if missing:
        raise SpecError(
            f"{function}.estimate(): missing size{'s' * (len(missing) > 1)} for "
            f"{', '.join(missing)}; pass {', '.join(f'{m}=...' for m in missing)}"
        )
    sizes: Sizes = dict(module_dims)
    sizes.update(given)
    return sizes, passthrough


def _shape(spec: TensorSpec, sizes: Sizes) -> tuple[int, ...]:
    shape: list[int] = []
    plain = {k: v for k, v in sizes.items() if isinstance(v, int)}
    for axis in spec.axes:
        if axis.kind is AxisKind.FIXED:
            assert axis.size is not None
            shape.append(axis.size)
        elif axis.kind is AxisKind.NAMED:
            assert axis.name is not None
            size = sizes[axis.name]
            shape.append(size if isinstance(size, int) else int(torch.Size(size).numel()))
        elif axis.kind is AxisKind.SYMBOLIC:
            assert axis.expression is not None
            shape.append(axis.expression.evaluate(plain))
        elif axis.kind is AxisKind.VARIADIC:
            assert axis.name is not None
            size = sizes[axis.name]
            shape.extend((size,) if isinstance(size, int) else size)
        elif axis.kind is AxisKind.ANONYMOUS_VARIADIC:
            size = sizes.get(ELLIPSIS, ())
            shape.extend((size,) if isinstance(size, int) else size)
        else:
            shape.append(1)  # an anonymous "_" axis: any size will do
    return tuple(shape)


def _default_dtype(spec: TensorSpec, dtype: torch.dtype | None) -> torch.dtype:
    allowed = spec.dtypes
    if allowed is None:
        return dtype or torch.float32
    if dtype is not None and dtype in allowed:
        return dtype
    for preferred in (torch.float32, torch.int64, torch.bool):
        if preferred in allowed:
            return preferred
    return sorted(allowed, key=str)[0]


def meta_arguments(
    function: str,
    contract: Contract,
    args: tuple[Any, ...],
    sizes: Sizes,
    passthrough: Mapping[str, Any],
    dtype: torch.dtype | None,
    grad: tuple[str, ...],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments for a dry run: ``meta`` tensors built from the annotations at ``sizes``."""
    specs = _parameter_specs(contract)
    unknown_grad = sorted(set(grad) - set(specs))
    if unknown_grad:
        raise SpecError(
            f"{function}.estimate(): grad names {', '.join(unknown_grad)}, which "
            f"{'is not a tensor parameter' if len(unknown_grad) == 1 else 'are not tensor '}"
            f"{'' if len(unknown_grad) == 1 else 'parameters'}"
            f" (tensor parameters: {', '.join(specs) or 'none'})"
        )
    kwargs: dict[str, Any] = {}
    for param in contract.parameters:
        if param.index is not None and param.index < len(args):
            continue
        if param.name in passthrough:
            kwargs[param.name] = passthrough[param.name]
        elif param.name in specs:
            spec = specs[param.name]
            try:
                shape = _shape(spec, sizes)
            except KeyError as exc:
                raise SpecError(
                    f"{function}.estimate(): argument '{param.name}' (\"{spec.dim_str}\") "
                    f"needs {exc.args[0]}=..."
                ) from None
            tensor = torch.empty(shape, dtype=_default_dtype(spec, dtype), device="meta")
            kwargs[param.name] = tensor.requires_grad_(param.name in grad)
        elif param.index == 0 and contract.takes_self:
            raise SpecError(
                f"{function}.estimate(): a method needs its object first, e.g. "
                f"{function}.estimate(obj, ...) (or model.estimate(...) for typedflops.nn "
                "models); its formula is only known through such an estimate"
            )
        elif contract.signature.parameters[param.name].default is inspect.Parameter.empty:
            raise SpecError(
                f"{function}.estimate(): cannot build argument '{param.name}' (not a tensor "
                f"annotation); pass {param.name}=... to estimate"
            )
    return args, kwargs


def _to_meta(value: Any, dtype: torch.dtype | None = None) -> Any:
    """A meta copy (same shape, strides and ``requires_grad``; floats cast to ``dtype``)."""
    if isinstance(value, torch.Tensor):
        cast = dtype if dtype is not None and value.is_floating_point() else value.dtype
        meta = torch.empty_like(value, device="meta", dtype=cast)
        return meta.requires_grad_(value.requires_grad) if meta.is_floating_point() else meta
    if isinstance(value, (list, tuple)):
        return type(value)(_to_meta(item, dtype) for item in value)
    if isinstance(value, dict):
        return {key: _to_meta(item, dtype) for key, item in value.items()}
    return value


def _single_call(session: Node) -> Cost:
    if len(session.children) == 1 and len(session.children[0].ops) == len(session.ops):
        return session.children[0].cost()
    return session.cost()


def dry_run_call(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    dtype: torch.dtype | None = None,
) -> Cost:
    """Count ``fn(*args, **kwargs)`` on meta copies (module parameters included).

    ``dtype``, when given, casts every floating tensor of the dry run (inputs, parameters).

    A body that cannot run on meta tensors (one that reads values) is run once on the real
    arguments instead, still recorded.
    """
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    forward = getattr(type(module), "forward", None)
    if (
        isinstance(module, torch.nn.Module)
        and module is not fn
        and getattr(fn, "__func__", None) is not forward
    ):
        module = None  # another method than forward: run it as it is
    meta_args, meta_kwargs = _to_meta(args, dtype), _to_meta(kwargs, dtype)
    session = Node("<dry run>", None, session=True)
    try:
        with config.disabled(False), recording(session):
            if isinstance(module, torch.nn.Module):
                state = {
                    name: _to_meta(tensor, dtype)
                    for name, tensor in itertools.chain(
                        module.named_parameters(), module.named_buffers()
                    )
                }
                # module(...) runs forward with the meta parameters in place of the real ones.
                torch.func.functional_call(module, state, meta_args, meta_kwargs)
            else:
                fn(*meta_args, **meta_kwargs)
        return _single_call(session)
    except (NotImplementedError, RuntimeError):
        session = Node("<run>", None, session=True)
        with config.disabled(False), recording(session):
            fn(*args, **kwargs)
        return _single_call(session)
