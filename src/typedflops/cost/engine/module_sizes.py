"""The sizes a module names or holds: its declared dims (``typedflops_dims()``), its int
attributes and its config object's that size one of its weights' axes, the dims its typed
submodules declare, and the names that count its repeated blocks."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

__all__ = ["config_fields", "held_dims", "module_dims", "module_names", "module_repeats"]


def module_dims(obj: Any) -> dict[str, int]:
    """A typed module's own sizes (``typedflops_dims()``), or none."""
    dims = getattr(obj, "typedflops_dims", None)
    return dict(dims()) if callable(dims) else {}


def module_names(module: Any) -> dict[str, int]:
    """Sizes a module names: its declared dims (``typedflops_dims()``), then int attributes
    of its own classes whose value is the size of one of its weights' (or buffers') axes
    (``self.d_ff = d_ff`` beside a ``(d_ff, d_model)`` weight)."""
    found = module_dims(module)
    if not isinstance(module, torch.nn.Module):
        return found
    axes = {size for t in (*module.parameters(), *module.buffers()) for size in t.shape}
    for sub in module.modules():
        if type(sub).__module__.startswith("torch."):
            continue
        for name, value in _int_fields(sub):
            if value in axes and name not in found:
                found[name] = value
    return found


_CONFIG_NAMES = ("config", "cfg", "args", "hparams", "params")

#: The most fields a dict inside a config has to be taken for a config itself.
_MOST_FIELDS = 64


def config_fields(value: Any, name: str | None = None) -> dict[str, Any] | None:
    """The fields of a config: a dataclass, an object with attributes (a namespace), a
    named tuple, or a dict of names held under a config's name (``cfg``, ``config``...;
    ``name`` None: inside a config, at most :data:`_MOST_FIELDS` of them), not a table such
    as a vocabulary; None for anything else (a class, a function, a module, a tensor)."""
    if isinstance(value, dict):
        if name is None and len(value) > _MOST_FIELDS:
            return None
        if name is not None and name not in _CONFIG_NAMES:
            return None
        if value and all(isinstance(key, str) and key.isidentifier() for key in value):
            return dict(value)
        return None
    if isinstance(value, tuple):
        return value._asdict() if hasattr(value, "_asdict") else None
    if isinstance(value, type) or callable(value):
        return None
    if isinstance(value, torch.nn.Module | torch.Tensor):
        return None
    if dataclasses.is_dataclass(value):  # (its fields set in ``__post_init__`` too)
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return dict(vars(value)) if hasattr(value, "__dict__") else None


def _int_fields(module: Any) -> list[tuple[str, int]]:
    """A module's public int attributes, then those of its config object (a dataclass, or an
    attribute named ``config``, ``cfg``, ``args``...: an object, a dict, a named tuple):
    ``GPT.config.n_embd``, ``self.cfg["hidden"]``."""
    fields: list[tuple[str, int]] = []
    configs: list[dict[str, Any]] = []
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        if type(value) is int:
            fields.append((name, value))
        elif (dataclasses.is_dataclass(value) or name in _CONFIG_NAMES) and (
            config := config_fields(value, name)
        ) is not None:
            configs.append(config)
    for config in configs:
        fields.extend(
            (name, value)
            for name, value in config.items()
            if type(value) is int and not name.startswith("_")
        )
    return fields


def held_dims(module: Any) -> dict[str, int]:
    """Sizes a module holds, for a method's dims that its caller does not give: what
    :func:`module_names` finds, then the dims its typed submodules declare (a typed
    ``Linear``'s ``d_in``), where every submodule declaring one name gives it one size."""
    found = module_names(module)
    if not isinstance(module, torch.nn.Module):
        return found
    seen: dict[str, set[int]] = {}
    for sub in module.modules():
        for name, size in module_dims(sub).items():
            seen.setdefault(name, set()).add(size)
    for name, sizes in seen.items():
        if len(sizes) == 1 and name not in found:
            found[name] = next(iter(sizes))
    return found


def module_repeats(module: Any) -> dict[str, int]:
    """Names for how many times a module repeats a block: its int attributes (or declared
    dims) equal to the length of one of its ``ModuleList``/``Sequential`` children, those
    that say "layer", "block" or "depth" first (``self.num_layers`` beside 12 blocks)."""
    if not isinstance(module, torch.nn.Module):
        return {}
    lengths = {
        len(sub)
        for sub in module.modules()
        if isinstance(sub, torch.nn.ModuleList | torch.nn.Sequential) and len(sub) > 1
    }
    candidates = dict(module_dims(module))
    candidates.update(_int_fields(module))
    found = {name: value for name, value in candidates.items() if value in lengths}
    preferred = {
        name: value
        for name, value in found.items()
        if any(word in name.lower() for word in ("layer", "block", "depth"))
    }
    return preferred or found
