"""What a decorated call's cost depends on besides its code: its arguments' metadata.

``signature`` keys ``record()`` rows (a module by identity: its calls are its rows);
``structure`` keys what is shared between modules built alike (a fitted formula, the events
of a block repeated in a dry run): class, weights' shapes, settings, training mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["signature", "signature_without_sizes", "structural_signature", "structure"]


def signature(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """A call's arguments as a hashable key: tensors by shape, dtype, device and
    ``requires_grad``, modules by identity, plain values as they are."""
    return (
        tuple(describe(a) for a in args),
        tuple(sorted((k, describe(v)) for k, v in kwargs.items())),
        torch.is_grad_enabled(),
    )


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


def describe(value: Any) -> Any:
    """One argument as a hashable key (see :func:`signature`)."""
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.dtype, value.device.type, value.requires_grad)
    if isinstance(value, torch.nn.Module):
        return ("module", id(value), value.training)
    if value is None or isinstance(value, int | float | str | bool | torch.dtype):
        return value
    if isinstance(value, list | tuple):
        return tuple(describe(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), describe(v)) for k, v in value.items()))
    return ("object", type(value).__qualname__)


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
