"""What a recorded call ran under besides its arguments' shapes, kept when its work is made
so that the formula fitted later (when a record's rows are read) is fitted as the call ran.

A row's formula comes from dry runs of the function made when the row is read, which may
be long after the call: a global flag, a module attribute, a config's field, a module's
train/eval mode or a parameter's shape may have changed since, and the body may take
another path now. Two parts:

- torch's global settings that change which ops run or what they make (the default
  dtype, the attention kernels allowed, deterministic algorithms, cuDNN, autocast as the
  body reads it): kept, and put back while the fit's dry runs run (:func:`as_called`);
- what the body reads that cannot be put back (its globals and the attributes it reads of
  them, its closure, the helpers of its own module it calls, its arguments' settings,
  modules' structure and forward hooks): kept as a key (:func:`read_key`); a row whose
  key reads otherwise when it is fitted keeps its counts as numbers, not exact.

Both are taken once per work (a call that did new work), never per call.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from .signature import describe, structure

__all__ = ["as_called", "read_key", "torch_state"]

_SIMPLE = (int, float, str, bool, bytes, complex, type(None), torch.dtype, torch.device)
#: Helpers called by a body are followed this deep (in the body's own module).
_DEPTH = 2
_AUTOCAST = ("cpu", "cuda")


def torch_state() -> tuple[Any, ...]:
    """torch's global settings that a body's ops depend on, as they are now."""
    sdp = torch.backends.cuda
    return (
        torch.get_default_dtype(),
        sdp.flash_sdp_enabled(),  # type: ignore[no-untyped-call]
        sdp.mem_efficient_sdp_enabled(),  # type: ignore[no-untyped-call]
        sdp.math_sdp_enabled(),  # type: ignore[no-untyped-call]
        sdp.cudnn_sdp_enabled(),  # type: ignore[no-untyped-call]
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.enabled,
        torch.backends.mkldnn.enabled,
        tuple(
            (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
            for device in _AUTOCAST
        ),
    )


def _setters() -> tuple[Any, ...]:
    """How each of :func:`torch_state`'s entries is set, in its order."""
    sdp = torch.backends.cuda

    def autocast(casts: tuple[tuple[bool, torch.dtype], ...]) -> None:
        for device, (enabled, cast) in zip(_AUTOCAST, casts, strict=True):
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, cast)

    def cudnn(on: bool) -> None:
        setattr(torch.backends.cudnn, "enabled", on)  # noqa: B010 (typed as a ContextProp)

    def mkldnn(on: bool) -> None:
        setattr(torch.backends.mkldnn, "enabled", on)  # noqa: B010

    return (
        torch.set_default_dtype,
        sdp.enable_flash_sdp,
        sdp.enable_mem_efficient_sdp,
        sdp.enable_math_sdp,
        sdp.enable_cudnn_sdp,
        None,  # (deterministic algorithms: set with the next entry)
        None,
        cudnn,
        mkldnn,
        autocast,
    )


def _set_torch_state(state: tuple[Any, ...], now: tuple[Any, ...]) -> None:
    """Set the entries of ``state`` that differ from ``now`` (one torch refuses to set, as
    cuDNN's flags after ``torch.backends.disable_global_flags()``, stays as it is)."""
    for setter, value, was in zip(_setters(), state, now, strict=True):
        if setter is None or value == was:
            continue
        with contextlib.suppress(RuntimeError):
            setter(value)
    if state[5:7] != now[5:7]:
        with contextlib.suppress(RuntimeError):
            torch.use_deterministic_algorithms(state[5], warn_only=state[6])


@contextlib.contextmanager
def as_called(state: tuple[Any, ...] | None) -> Iterator[None]:
    """torch's settings as ``state`` holds them inside the block (set back after)."""
    now = torch_state()
    if state is None or state == now:
        yield
        return
    try:
        _set_torch_state(state, now)
        yield
    finally:
        _set_torch_state(now, torch_state())


def read_key(
    function: Any, module: Any, positional: tuple[Any, ...], named: Mapping[str, Any]
) -> Any:
    """What the body of ``function`` (a decorated function) reads besides its tensors'
    shapes, as it is now: its globals and closure, its module's structure (``module``: the
    object of a method, or None) and its other arguments (tensors as stubs)."""
    body = getattr(function, "__wrapped__", function)
    names, strings = _names(getattr(body, "__code__", None))
    found: list[Any] = [_reads(body, 0, {id(body)}), _global_hooks()]
    if module is not None:
        found.append(_module_key(module))
        attributes = vars(module)
        found.append(
            tuple(
                (name, _key(attributes[name], names, strings, 1))
                for name in sorted(n for n in names if n in attributes)
            )
        )
    found.append(tuple(_argument(value) for value in positional))
    found.append(tuple(sorted((name, _argument(value)) for name, value in named.items())))
    return tuple(found)


def _module_key(module: torch.nn.Module) -> Any:
    """A module by structure (see :func:`.signature.structure`) and the forward hooks on it
    and its submodules."""
    hooks = tuple(
        (
            prefix,
            tuple(map(id, sub._forward_pre_hooks.values())),
            tuple(map(id, sub._forward_hooks.values())),
        )
        for prefix, sub in module.named_modules()
        if sub._forward_pre_hooks or sub._forward_hooks
    )
    return (structure(module), hooks)


def _global_hooks() -> Any:
    """The forward hooks registered for every module."""
    hooks = torch.nn.modules.module
    return (
        tuple(map(id, hooks._global_forward_pre_hooks.values())),
        tuple(map(id, hooks._global_forward_hooks.values())),
    )


def _argument(value: Any, depth: int = 0) -> Any:
    """An argument by what may change in it after the call (its tensors' shapes are the
    row's own, and tensors are not kept: a tensor is only a tensor here)."""
    if isinstance(value, torch.nn.Module):
        return _module_key(value)
    if isinstance(value, torch.Tensor) or type(value).__name__ == "TensorStub":
        return "tensor"
    if depth < 4 and isinstance(value, list | tuple) and len(value) <= 64:
        return tuple(_argument(v, depth + 1) for v in value)
    if depth < 4 and type(value) is dict:
        return tuple(sorted((str(k), _argument(v, depth + 1)) for k, v in value.items()))
    return describe(value)


def _names(code: types.CodeType | None) -> tuple[frozenset[str], frozenset[str]]:
    """The names a code object (and the code nested in it) reads, and its string constants."""
    names: set[str] = set()
    strings: set[str] = set()
    pending = [code] if code is not None else []
    while pending:
        current = pending.pop()
        names.update(current.co_names)
        for constant in current.co_consts:
            if isinstance(constant, types.CodeType):
                pending.append(constant)
            elif type(constant) is str:
                strings.add(constant)
    return frozenset(names), frozenset(strings)


def _reads(function: Any, depth: int, seen: set[int]) -> Any:
    """The values a plain function's code reads from its globals and closure, as keys."""
    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType):
        return ("object", id(function))
    names, strings = _names(code)
    spaces = getattr(function, "__globals__", {})
    found: list[Any] = []
    for name in sorted(n for n in names if n in spaces):
        value = spaces[name]
        if (
            isinstance(value, types.FunctionType)
            and value.__globals__ is spaces
            and depth < _DEPTH
            and id(value) not in seen
        ):
            seen.add(id(value))
            found.append((name, _reads(value, depth + 1, seen)))
        else:
            found.append((name, _key(value, names, strings, 0)))
    for index, cell in enumerate(getattr(function, "__closure__", None) or ()):
        try:
            contents = cell.cell_contents
        except ValueError:  # (empty yet)
            continue
        found.append((index, _key(contents, names, strings, 0)))
    return tuple(found)


def _key(value: Any, names: frozenset[str], strings: frozenset[str], depth: int) -> Any:
    """One value a body reads: a plain value as it is; a tensor by its shape and dtype; a
    module by structure; a Python module, an object or a dict by the attributes (or
    constant keys) the body names in it; anything else by identity."""
    if isinstance(value, _SIMPLE):
        return value
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, torch.nn.Module):
        return _module_key(value)
    if depth > 2:
        return ("object", id(value))
    if isinstance(value, types.ModuleType):
        space = vars(value)
        return (
            "module",
            value.__name__,
            tuple(
                (name, _key(space[name], names, strings, depth + 1))
                for name in sorted(n for n in names if n in space)
                if not isinstance(space[name], types.ModuleType | types.FunctionType | type)
                or depth == 0
            ),
        )
    if isinstance(value, tuple | frozenset) and len(value) <= 64:
        return (type(value).__name__, tuple(_key(v, names, strings, depth + 1) for v in value))
    if type(value) is dict:
        return (
            "dict",
            id(value),
            tuple(
                (key, _key(value[key], names, strings, depth + 1))
                for key in sorted(k for k in strings if k in value)
            ),
        )
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType | type):
        return ("object", id(value))
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict):
        return (
            "object",
            id(value),
            tuple(
                (name, _key(fields[name], names, strings, depth + 1))
                for name in sorted(n for n in names if n in fields)
            ),
        )
    return ("object", id(value))
