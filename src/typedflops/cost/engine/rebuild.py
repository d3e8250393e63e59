"""A module built again at other sizes of its own, so that a dry run can check a formula
in them (``n_embd``, ``d_ff``, ``n_layers``) instead of trusting a value.

A module can be rebuilt in two ways, tried in order:

- ``typedflops_resized(sizes, dtype)``, with ``typedflops_dims()`` naming its sizes (the
  modules of :mod:`typedflops.nn` declare both);
- its class's constructor, called again with the arguments read back from the module: an
  attribute of each parameter's name (on the module, or the one value its submodules all
  hold under that name), a submodule passed in, the call's dim of that name, a config of
  the dataclass the parameter is annotated with (made of such values), or the parameter's
  default; a default of None, where the argument derives from another
  (``hidden_features or in_features``), is replaced by the size of the module's axes that
  builds its twin, so that widths equal at these sizes are not changed together. Its
  sizes are the int arguments and the int fields of a config passed in (a dataclass, a
  namespace, a named tuple, a dict of names passed as ``cfg`` or ``config``...):
  ``GPT(config)`` is rebuilt with ``config.n_embd`` changed, ``Model(cfg)`` with
  ``cfg["hidden"]``.

A plain module whose constructor cannot be called again, over typed submodules (a typed
``Linear`` inside), is copied with those submodules rebuilt at the sizes they declare.

A constructor is trusted only where the module it builds at the original sizes is the
original's twin: the same submodules (names and classes), parameters and buffers (names
and shapes), and the same plain attributes (a ``functools.partial`` by its function and
arguments). Building happens with the output muted and
the random state restored, on the dry run's device (``meta``: nothing is allocated).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import io
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .module_sizes import config_fields, module_dims

__all__ = ["OWN", "Rebuild", "rebuild_of"]

_MISSING = object()

Make = Callable[[Mapping[str, int], torch.dtype | None], torch.nn.Module]


# The key of a module's size in the sizes of a dry run, beside the call's dims: a size
# the module declares (``typedflops_dims()``) is a dim of its calls by that name; one read
# from its constructor is the module's own until dry runs show a dim that follows it.
OWN = "self."


@dataclass(frozen=True)
class Rebuild:
    """How to build ``module`` again: ``sizes`` are the sizes that can be changed (by the
    name a formula gives them) at their values in ``module``; ``declared`` when the module
    names them itself (``typedflops_dims()``). A module built by its constructor keeps the
    arguments it was called with (``passed``, by name: what is not a size among them passes
    through every rebuild unchanged) and the ints given in two places (``doubled``: left
    at their values); None and none for the other ways."""

    module: torch.nn.Module
    sizes: dict[str, int]
    make: Make
    declared: bool = False
    passed: Mapping[str, Any] | None = None
    doubled: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def key(self, name: str) -> str:
        """The key of size ``name`` in a dry run's sizes."""
        return name if self.declared else OWN + name

    def changes(self, assignment: Mapping[str, Any]) -> dict[str, int]:
        """The sizes that ``assignment`` (a dry run's sizes, by key) changes."""
        found: dict[str, int] = {}
        for name, size in self.sizes.items():
            value = assignment.get(self.key(name), size)
            if isinstance(value, int) and value != size:
                found[name] = value
        return found

    def at(self, sizes: Mapping[str, int], dtype: torch.dtype | None) -> torch.nn.Module:
        """The module with ``sizes`` changed (the others as they are), on the current
        default device, its floating tensors in ``dtype`` (or as the original's), each
        parameter's ``requires_grad`` and each submodule's ``training`` as the original's."""
        with _quiet_build():
            rebuilt = self.make({**self.sizes, **sizes}, dtype)
        _match(rebuilt, self.module, dtype)
        return rebuilt


def rebuild_of(module: Any, known: Mapping[str, Any] | None = None) -> Rebuild | None:
    """How to build ``module`` at other sizes of its own, or None when it cannot be
    (``known``: the call's dims, for constructor arguments the module does not keep)."""
    if not isinstance(module, torch.nn.Module):
        return None
    resize = getattr(module, "typedflops_resized", None)
    own = module_dims(module)
    if callable(resize) and own:

        def resized(sizes: Mapping[str, int], dtype: torch.dtype | None) -> torch.nn.Module:
            rebuilt: torch.nn.Module = resize(dict(sizes), dtype)
            return rebuilt

        return Rebuild(module, own, resized, declared=True)
    return _by_constructor(module, known or {}) or _by_typed_submodules(module)


def _resizable(module: torch.nn.Module) -> bool:
    return callable(getattr(module, "typedflops_resized", None)) and bool(module_dims(module))


def _by_typed_submodules(module: torch.nn.Module) -> Rebuild | None:
    """A module its constructor cannot rebuild, over typed submodules that can be: a copy
    with those submodules rebuilt (the sizes they declare, where all agree on a value)."""
    seen: dict[str, set[int]] = {}
    for sub in module.modules():
        if sub is not module and _resizable(sub):
            for name, size in module_dims(sub).items():
                seen.setdefault(name, set()).add(size)
    sizes = {name: next(iter(values)) for name, values in seen.items() if len(values) == 1}
    if not sizes:
        return None

    def swapped(changed: Mapping[str, int], dtype: torch.dtype | None) -> torch.nn.Module:
        return _swapped(module, changed, dtype)

    return Rebuild(module, sizes, swapped)


def _swapped(
    module: torch.nn.Module, changed: Mapping[str, int], dtype: torch.dtype | None
) -> torch.nn.Module:
    """``module`` with each typed submodule whose sizes ``changed`` changes rebuilt at them
    (the modules on the way copied, the others shared)."""
    own = module_dims(module)
    if _resizable(module) and any(changed.get(name, size) != size for name, size in own.items()):
        resize = module.typedflops_resized
        wanted = {name: changed.get(name, size) for name, size in own.items()}
        rebuilt: torch.nn.Module = resize(wanted, dtype)  # type: ignore[operator]
        return rebuilt
    children = {
        name: _swapped(child, changed, dtype)
        for name, child in module._modules.items()
        if child is not None
    }
    if all(child is module._modules[name] for name, child in children.items()):
        return module
    twin = copy.copy(module)
    twin._modules = {**module._modules, **children}
    return twin


@dataclass(frozen=True)
class _Argument:
    name: str
    value: Any
    positional: bool


def _by_constructor(module: torch.nn.Module, known: Mapping[str, int]) -> Rebuild | None:
    cls = type(module)
    if cls.__module__.startswith("torch."):
        return None  # torch's own modules: their sizes are their callers' to change
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return None
    arguments: list[_Argument] = []
    unread: list[int] = []  # the arguments left at a default of None
    for parameter in list(signature.parameters.values())[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        value = _read_back(module, parameter, known)
        if value is _MISSING:
            if parameter.default is parameter.empty:
                return None
            value = parameter.default
            if value is None:
                unread.append(len(arguments))
        positional = parameter.kind is parameter.POSITIONAL_ONLY
        arguments.append(_Argument(parameter.name, value, positional))
    # A size left at None is derived from another (timm's ``hidden_features or in_features``):
    # where the module's own value of it builds the twin too, it is read as given, so that
    # a width equal to another at these sizes is not changed with it.
    sizes = _axis_sizes(module) if unread else []
    while unread:
        found = None
        for index, size in ((index, size) for index in unread for size in sizes):
            given = [*arguments]
            given[index] = dataclasses.replace(arguments[index], value=size)
            if _constructor(cls, given, module) is not None:
                found = index
                arguments = given
                break
        if found is None:
            break
        unread.remove(found)  # the others are tried again with this one given
    built = _constructor(cls, arguments, module)
    if built is None:  # (a layer factory given, kept by nothing: ``norm_layer=partial(...)``)
        for index, factory in _factories_held(module, arguments):
            given = [*arguments]
            given[index] = dataclasses.replace(arguments[index], value=factory)
            built = _constructor(cls, given, module)
            if built is not None:
                break
    return built


def _factories_held(
    module: torch.nn.Module, arguments: list[_Argument]
) -> Iterator[tuple[int, Any]]:
    """For each argument at a default layer factory (a class, or a ``functools.partial`` of
    one), the factories a submodule was built by as far as it tells (the one of the
    argument's name, ``act``, else one of the default's class): its class, and a partial of
    it with the options the submodule keeps (its constructor's parameters held as plain
    values, sizes left out: ``eps=1e-5``)."""
    for index, argument in enumerate(arguments):
        default = _factory_class(argument.value)
        if default is None:
            continue
        named = module._modules.get(argument.name)
        built = (
            [named] if named is not None else [s for s in module.modules() if type(s) is default]
        )
        for sub in built[:1]:
            target = type(sub)
            yield index, target
            try:
                parameters = inspect.signature(target.__init__).parameters
            except (TypeError, ValueError):
                continue
            # (bools, floats and strings: an int or a tuple of them is a size it is given;
            # a flag kept only as whether its weight exists: `LayerNorm(d, bias=False)`)
            options: dict[str, Any] = {}
            for name, parameter in parameters.items():
                held = vars(sub).get(name)
                if name != "self" and isinstance(held, bool | float | str):
                    options[name] = held
                elif isinstance(parameter.default, bool) and name in sub._parameters:
                    options[name] = sub._parameters[name] is not None
            if options:
                yield index, functools.partial(target, **options)


def _factory_class(value: Any) -> type[torch.nn.Module] | None:
    """The module class a layer factory builds (the class, or a ``functools.partial`` of
    it), or None for anything else."""
    target = value.func if isinstance(value, functools.partial) else value
    if isinstance(target, type) and issubclass(target, torch.nn.Module):
        return target
    return None


def _axis_sizes(module: torch.nn.Module) -> list[int]:
    """The sizes of the axes of a module's parameters and buffers, each once, in order."""
    tensors = (*module.parameters(), *module.buffers())
    return list(dict.fromkeys(size for tensor in tensors for size in tensor.shape))


def _constructor(
    cls: type[torch.nn.Module], arguments: list[_Argument], module: torch.nn.Module
) -> Rebuild | None:
    """How ``cls`` builds ``module`` again from ``arguments``, where it builds its twin."""
    where, doubled = _size_places(arguments)
    if not where:
        return None
    sizes = {name: _value_at(arguments, place) for name, place in where.items()}

    def construct(changed: Mapping[str, int], dtype: torch.dtype | None) -> torch.nn.Module:
        values = {argument.name: argument.value for argument in arguments}
        fields: dict[str, dict[str, int]] = {}
        for name, size in changed.items():
            argument, field = where[name]
            if field is None:
                values[argument] = size
            else:
                fields.setdefault(argument, {})[field] = size
        for argument, changes in fields.items():
            config = values[argument]
            # A config is copied only where a field changes (the original object at its
            # own sizes: a plain class compares by identity).
            changes = {f: v for f, v in changes.items() if _field(config, f) != v}
            if changes:
                values[argument] = _replaced(config, changes)
        positional = [values[a.name] for a in arguments if a.positional]
        keyword = {a.name: values[a.name] for a in arguments if not a.positional}
        built: torch.nn.Module = cls(*positional, **keyword)
        return built

    try:
        with torch.device("meta"), _quiet_build():
            twin = construct(sizes, None)
    except Exception:
        return None
    if not _twins(module, twin):
        return None
    passed = {argument.name: argument.value for argument in arguments}
    return Rebuild(module, sizes, construct, passed=passed, doubled=doubled)


def _read_back(
    module: torch.nn.Module, parameter: inspect.Parameter, known: Mapping[str, int]
) -> Any:
    """The value a constructor parameter had: the module's attribute of its name (or
    ``_name``), a submodule of that name, the one value every submodule holding an
    attribute of that name holds, the call's dim of that name (``known``), or a config of
    the dataclass the parameter is annotated with, made of such values and its defaults."""
    name = parameter.name
    own = vars(module)
    for key in (name, f"_{name}"):
        if key in own and not isinstance(own[key], torch.Tensor):
            return own[key]
    if name in module._modules and _factory_class(parameter.default) is None:
        return module._modules[name]  # (not where the parameter builds it: ``act=nn.GELU``)
    found = _held_by_submodules(module, name)
    if found is not _MISSING:
        return found
    if type(known.get(name)) is int:
        return known[name]
    config = _annotated_dataclass(type(module), parameter)
    return _MISSING if config is None else _config_of(config, module, known)


def _held_by_submodules(module: torch.nn.Module, name: str) -> Any:
    found = [vars(sub)[name] for sub in module.modules() if sub is not module and name in vars(sub)]
    plain = (int, float, bool, str, type(None))
    if (
        found
        and isinstance(found[0], plain)
        and all(type(v) is type(found[0]) and v == found[0] for v in found)
    ):
        return found[0]
    return _MISSING


def _annotated_dataclass(cls: type, parameter: inspect.Parameter) -> type | None:
    """The dataclass a parameter is annotated with (a name is looked up in the module the
    constructor is written in, never evaluated)."""
    hint = parameter.annotation
    if isinstance(hint, str) and hint.isidentifier():
        init = next((vars(c)["__init__"] for c in cls.__mro__ if "__init__" in vars(c)), None)
        hint = getattr(init, "__globals__", {}).get(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    return None


def _config_of(config: type, module: torch.nn.Module, known: Mapping[str, int]) -> Any:
    """A config made of the values the module's submodules hold, the call's dims and the
    fields' defaults (a wrong guess builds another module, which the twin check refuses)."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(config):
        if not field.init:
            continue
        value = _held_by_submodules(module, field.name)
        if value is _MISSING and type(known.get(field.name)) is int:
            value = known[field.name]
        if value is _MISSING and field.default is not dataclasses.MISSING:
            value = field.default
        if value is _MISSING and field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        if value is _MISSING:
            return _MISSING
        values[field.name] = value
    try:
        return config(**values)
    except Exception:
        return _MISSING


def _int_fields(config: Any, name: str) -> dict[str, int] | None:
    """The int fields of a config passed as argument ``name``; None where it is none."""
    fields = config_fields(config, name)
    if fields is None:
        return None
    if dataclasses.is_dataclass(config):  # (those its constructor takes)
        fields = {f.name: fields[f.name] for f in dataclasses.fields(config) if f.init}
    return {
        field: value
        for field, value in fields.items()
        if type(value) is int and not field.startswith("_")
    }


def _size_places(
    arguments: list[_Argument],
) -> tuple[dict[str, tuple[str, str | None]], dict[str, int]]:
    """Each size's place among the arguments: an int argument ``(name, None)`` or a config
    field ``(argument, field)``; a name found in two places is left out (ambiguous), and
    returned apart with its value where both places give one."""
    where: dict[str, tuple[str, str | None]] = {}
    doubled: set[str] = set()
    values: dict[str, set[int]] = {}
    for argument in arguments:
        places: dict[str, tuple[str, str | None]]
        if type(argument.value) is int:
            places = {argument.name: (argument.name, None)}
        elif (fields := _int_fields(argument.value, argument.name)) is not None:
            places = {field: (argument.name, field) for field in fields}
        else:
            continue
        for name, place in places.items():
            if name in where:
                doubled.add(name)
            where[name] = place
            values.setdefault(name, set()).add(_value_at(arguments, place))
    held = {name: next(iter(values[name])) for name in doubled if len(values[name]) == 1}
    return {name: place for name, place in where.items() if name not in doubled}, held


def _value_at(arguments: list[_Argument], place: tuple[str, str | None]) -> int:
    argument, field = place
    value = next(a.value for a in arguments if a.name == argument)
    return int(value if field is None else _field(value, field))


def _field(config: Any, name: str) -> Any:
    return config[name] if isinstance(config, dict) else getattr(config, name)


def _replaced(config: Any, changes: Mapping[str, int]) -> Any:
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.replace(config, **changes)
    if isinstance(config, tuple):  # (a named tuple)
        return config._replace(**changes)  # type: ignore[attr-defined]
    changed = copy.copy(config)
    for name, value in changes.items():
        if isinstance(changed, dict):
            changed[name] = value
        else:
            setattr(changed, name, value)
    return changed


def _twins(original: torch.nn.Module, twin: torch.nn.Module) -> bool:
    """Whether ``twin`` has ``original``'s submodules, tensors (by shape) and attributes."""
    modules = dict(original.named_modules(remove_duplicate=False))
    twins = dict(twin.named_modules(remove_duplicate=False))
    if list(modules) != list(twins):
        return False
    for name, module in modules.items():
        other = twins[name]
        if not _same_class(module, other):
            return False
        if not _same_tensors(module, other) or not _same_attributes(module, other):
            return False
    return True


def _same_class(module: torch.nn.Module, other: torch.nn.Module) -> bool:
    """Whether two modules are of one class; a module with parametrized tensors
    (``parametrize.register_parametrization``, ``parametrizations.weight_norm``,
    ``spectral_norm``, ``orthogonal``) is of a class made for it when it is registered, so
    two such are of one class where the classes they were made from are."""
    if type(module) is type(other):
        return True
    parametrized = torch.nn.utils.parametrize.is_parametrized
    return (
        parametrized(module)
        and parametrized(other)
        and type(module).__name__ == type(other).__name__
        and type(module).__bases__ == type(other).__bases__
    )


def _same_tensors(module: torch.nn.Module, other: torch.nn.Module) -> bool:
    def shapes(m: torch.nn.Module) -> dict[str, tuple[int, ...] | None]:
        found: dict[str, tuple[int, ...] | None] = {}
        for store in (m._parameters, m._buffers):
            for key, tensor in store.items():
                found[key] = None if tensor is None else tuple(tensor.shape)
        return found

    return shapes(module) == shapes(other)


def _same_attributes(module: torch.nn.Module, other: torch.nn.Module) -> bool:
    mine = {k: v for k, v in vars(module).items() if not k.startswith("_") and k != "training"}
    theirs = {k: v for k, v in vars(other).items() if not k.startswith("_") and k != "training"}
    if mine.keys() != theirs.keys():
        return False
    for key, value in mine.items():
        twin = theirs[key]
        if isinstance(value, torch.Tensor):
            if not isinstance(twin, torch.Tensor) or value.shape != twin.shape:
                return False
            continue
        if not _same_value(value, twin):
            return False
    return True


def _same_value(value: Any, twin: Any) -> bool:
    """Whether two plain attribute values are equal; a ``functools.partial``, which a
    constructor makes anew on each call (``partial(F.gelu, approximate="tanh")``) and which
    compares by identity, by its function, arguments and keywords."""
    if isinstance(value, functools.partial):
        return (
            type(twin) is type(value)
            and value.func is twin.func
            and len(value.args) == len(twin.args)
            and all(_same_value(a, b) for a, b in zip(value.args, twin.args, strict=True))
            and value.keywords.keys() == twin.keywords.keys()
            and all(_same_value(v, twin.keywords[k]) for k, v in value.keywords.items())
        )
    try:
        return value is twin or bool(value == twin)
    except Exception:
        return False


def _match(rebuilt: torch.nn.Module, original: torch.nn.Module, dtype: torch.dtype | None) -> None:
    """Give ``rebuilt`` the original's dtypes (or ``dtype`` for floats), ``requires_grad``
    and ``training`` flags, name by name; a submodule the original has no twin of (the
    13th block of a model rebuilt with 13 layers) takes its parent's ``training`` flag, so
    that a model in eval mode is rebuilt in eval mode throughout."""
    modules = dict(original.named_modules(remove_duplicate=False))
    rebuilt_modules = dict(rebuilt.named_modules(remove_duplicate=False))
    for name, sub in rebuilt_modules.items():
        twin = modules.get(name)
        if twin is sub:
            continue  # shared with the original (a copy's untouched part): left as it is
        if twin is not None:
            sub.training = twin.training
        elif name:
            sub.training = rebuilt_modules[name.rpartition(".")[0]].training
        for key, tensor in list(sub._parameters.items()):
            if tensor is None or (twin is not None and twin._parameters.get(key) is tensor):
                continue
            source = None if twin is None else twin._parameters.get(key)
            cast = _dtype(tensor, source, dtype)
            if cast != tensor.dtype:
                tensor.data = tensor.data.to(cast)
            if source is not None:
                tensor.requires_grad_(source.requires_grad)
        for key, buffer in list(sub._buffers.items()):
            if buffer is None or (twin is not None and twin._buffers.get(key) is buffer):
                continue
            source = None if twin is None else twin._buffers.get(key)
            cast = _dtype(buffer, source, dtype)
            if cast != buffer.dtype:
                sub._buffers[key] = buffer.to(cast)


def _dtype(
    tensor: torch.Tensor, source: torch.Tensor | None, dtype: torch.dtype | None
) -> torch.dtype:
    if not tensor.is_floating_point():
        return tensor.dtype
    if dtype is not None:
        return dtype
    return source.dtype if source is not None else tensor.dtype


@contextlib.contextmanager
def _quiet_build() -> Iterator[None]:
    """Build without printing, warning or moving the random state (nanoGPT prints its
    parameter count; initialisers draw random numbers)."""
    with (
        contextlib.redirect_stdout(io.StringIO()),
        warnings.catch_warnings(),
        torch.random.fork_rng(devices=[]),
    ):
        warnings.simplefilter("ignore")
        yield
