"""What a decorated call's cost depends on besides its code: its arguments' metadata.

``signature_without_sizes`` keys what ``record()`` rows of one function share (a fitted
formula); ``structural_signature`` keys a block repeated in a dry run (its first call's
events stand for the others); ``structure`` is a module as both see it: class, weights'
shapes, settings, training mode. A plain object (a config) is described by its settings,
so that calls with different configs are never taken for one another.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["describe", "signature_without_sizes", "structural_signature", "structure"]

_SIMPLE = (int, float, str, bool, type(None), torch.dtype)


def signature_without_sizes(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """What a row's call was besides its sizes: modules by structure (class, weights' shapes,
    training), so that rows of like modules share one fit."""

    def strip(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return (value.dim(), value.dtype, value.device.type, value.requires_grad)
        if isinstance(value, torch.nn.Module):
            return structure(value)
        return describe(value)

    return (tuple(strip(a) for a in args), tuple(sorted((k, strip(v)) for k, v in kwargs.items())))


def structure(module: torch.nn.Module) -> Any:
    """A module by what its calls' costs depend on: class, tensors' shapes, settings."""
    tensors: list[Any] = []
    settings: list[Any] = []
    # One walk over the submodules' own dicts (named_parameters() and modules() walk the
    # tree once per call each: a 96-layer model's blocks are each asked once per dry run).
    for prefix, sub in module.named_modules():
        for kind in (sub._parameters, sub._buffers):
            tensors.extend(
                (prefix, name, tuple(t.shape), t.dtype, t.requires_grad)
                for name, t in kind.items()
                if t is not None
            )
        settings.append(
            tuple(
                sorted((k, v) for k, v in vars(sub).items() if type(v) in (int, float, bool, str))
            )
        )
    return ("module", type(module).__qualname__, tuple(tensors), tuple(settings))


def describe(value: Any, depth: int = 0) -> Any:
    """One argument as a hashable key: tensors by shape, dtype, device and
    ``requires_grad``, modules by identity, plain values as they are, other objects by
    their type and settings (see :func:`settings`)."""
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.dtype, value.device.type, value.requires_grad)
    if isinstance(value, torch.nn.Module):
        return ("module", id(value), value.training)
    if value is None or isinstance(value, _SIMPLE):
        return value
    if depth > 4:
        return ("object", type(value).__qualname__)
    if isinstance(value, list | tuple):
        return tuple(describe(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), describe(v, depth + 1)) for k, v in value.items()))
    return ("object", type(value).__qualname__, settings(value, depth))


def settings(value: Any, depth: int = 0) -> Any:
    """What an object is set to: its attributes (a dataclass's fields, a config's
    ``__dict__``), or the object itself when it is compared by value (an enum, a
    ``torch.device``); None when neither can be told."""
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict):
        if len(fields) > 64:  # not a config: its simple settings only
            return tuple(sorted((k, v) for k, v in fields.items() if type(v) in _SIMPLE))
        return tuple(
            sorted(
                (name, describe(item, depth + 1))
                for name, item in fields.items()
                if not name.startswith("__")
            )
        )
    try:
        hash(value)
    except TypeError:
        return None
    compared_by_value = getattr(type(value), "__eq__", None) is not object.__eq__
    return value if compared_by_value else None


def structural_signature(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], cache: dict[int, Any] | None = None
) -> Any:
    """Like :func:`signature`, with modules by structure instead of identity (``cache``:
    structures already found, by module identity, for modules that do not change)."""

    def convert(value: Any) -> Any:
        if isinstance(value, torch.nn.Module):
            if cache is None:
                return structure(value)
            found = cache.get(id(value))
            if found is None:
                found = cache[id(value)] = (value, structure(value))
            return found[1]
        return describe(value)

    return (
        tuple(convert(a) for a in args),
        tuple(sorted((k, convert(v)) for k, v in kwargs.items())),
        torch.is_grad_enabled(),
    )
