"""The modules a dry run calls: storage-less copies of their tensors on the dry run's device,
and everything else about them left as the caller had it.

A dry run calls the caller's own modules (``self``, a model passed as an argument) with
their parameters and buffers swapped for copies on ``meta`` (or built again at other sizes,
see :mod:`.rebuild`); what the body assigns to them while it runs (``self.last = y``, a
cache, a buffer registered in ``forward``) is put back afterwards, as it is on any other
module the body reaches (see :mod:`.module_assignments`), and an object that is not a
module runs as a shallow copy of itself.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter
from torch.nn.utils.stateless import _reparametrize_module

from ...errors import SpecError
from .dryrun import Thunk
from .fit import Size
from .function_backward import dry_runs_own
from .known_values import note_values
from .module_assignments import assignments_put_back
from .rebuild import Rebuild
from .tensors import differentiable

__all__ = [
    "argument_modules",
    "backward_hooks",
    "copied_on",
    "copy_on",
    "has_lazy",
    "initialize_lazy",
    "lazy_on_meta",
    "module_device",
    "module_state",
    "own_copy",
    "refuse_script",
    "with_module",
    "with_modules",
]


def copy_on(device: str, tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """A storage-less copy: same shape, strides and ``requires_grad``; floats in ``dtype``."""
    cast = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
    copy = torch.empty_strided(tensor.shape, tensor.stride(), dtype=cast, device=device)
    return copy.requires_grad_(tensor.requires_grad) if differentiable(copy) else copy


def copied_on(device: str, value: Any, dtype: torch.dtype | None) -> Any:
    """A value passed through to a dry run: its tensors (in lists, tuples and dicts too) as
    storage-less copies on the run's device."""
    if isinstance(value, torch.Tensor):
        return copy_on(device, value, dtype)
    if type(value) in (list, tuple):
        return type(value)(copied_on(device, item, dtype) for item in value)
    if type(value) is dict:
        return {key: copied_on(device, item, dtype) for key, item in value.items()}
    return value


def module_state(
    device: str, module: torch.nn.Module, dtype: torch.dtype | None
) -> dict[str, torch.Tensor]:
    # Each module object once (a module shared by two parents is one place to set), each of
    # its own tensors by name (a weight tied between two modules is set in both, to one copy).
    state: dict[str, torch.Tensor] = {}
    buffers: set[int] = set()
    for prefix, sub in module.named_modules():
        for name, tensor in (
            *sub.named_parameters(recurse=False),
            *sub.named_buffers(recurse=False),
        ):
            state[f"{prefix}.{name}" if prefix else name] = tensor
        buffers.update(id(tensor) for tensor in sub.buffers(recurse=False))
    copies: dict[int, torch.Tensor] = {}
    for tensor in state.values():
        if id(tensor) not in copies:
            counter = _counter(tensor)
            copies[id(tensor)] = copy_on(device, tensor, dtype) if counter is None else counter
            if counter is None and id(tensor) in buffers:
                note_values(copies[id(tensor)], tensor)  # (a constant a body may read)
    return {name: copies[id(tensor)] for name, tensor in state.items()}


def _counter(tensor: torch.Tensor) -> torch.Tensor | None:
    """A copy with its value of a module's integer scalar on the CPU (batch norm's
    ``num_batches_tracked``): a body may read it (``momentum=None`` averages over
    ``1 / float(num_batches_tracked)``), and it costs no storage to speak of."""
    if tensor.dim() or tensor.is_floating_point() or tensor.is_complex() or tensor.is_meta:
        return None
    if tensor.device.type != "cpu" or isinstance(tensor, torch.nn.Parameter):
        return None
    return dry_runs_own(tensor.detach().clone())  # (its `add_(1)` runs on it)


def module_device(module: Any) -> str | None:
    if isinstance(module, torch.nn.Module):
        for tensor in (*module.parameters(), *module.buffers()):
            return tensor.device.type
    return None


def own_copy(obj: Any) -> Any:
    """The dry run's own shallow copy of a method's object that is not a module (None
    stays None): what the body assigns to ``self`` (``self.A = A`` in ``__init__``, a
    ``cached_property``) stays on the copy, never on the caller's object, whose real
    tensors must not be swapped for the dry run's storage-less ones.

    >>> class Pair:
    ...     def __init__(self, a: torch.Tensor) -> None:
    ...         self.a = a
    >>> pair = Pair(torch.ones(2))
    >>> twin = own_copy(pair)
    >>> twin.a = torch.empty(3, device="meta")
    >>> pair.a.device.type, twin is not pair
    ('cpu', True)
    """
    return None if obj is None else copy.copy(obj)


def with_module(
    module: Any,
    rebuild: Rebuild | None,
    device: str,
    sizes: Mapping[str, Size],
    dtype: torch.dtype | None,
    rebuilt_cache: dict[Any, torch.nn.Module] | None = None,
) -> tuple[Any, Callable[[Thunk], Any]]:
    """The module to call at ``sizes`` and how to run a thunk with its state on ``device``:
    the module with fake copies of its tensors, or, where ``sizes`` change its own sizes
    (or it declares them), the module built again at them (``rebuilt_cache``: those already
    built for the runs of one estimate, by their sizes)."""
    if not isinstance(module, torch.nn.Module):
        return own_copy(module), lambda thunk: thunk()
    refuse_script(module)
    changes = rebuild.changes(sizes) if rebuild is not None else {}
    # A module that declares its sizes is always built again (on meta, all its state is
    # meta: the backward a planner runs after the call needs no reparametrization).
    rebuilt = rebuild is not None and (rebuild.declared or bool(changes))
    original = module
    if rebuild is not None and rebuilt:
        key = (device, dtype, tuple(sorted(changes.items())))
        target = rebuilt_cache.get(key) if rebuilt_cache is not None else None
        if target is None:
            with torch.device(device):
                target = rebuild.at(changes, dtype)  # on the dry run's device: no storage
            if rebuilt_cache is not None:
                rebuilt_cache[key] = target
        module = target
    state = {
        name: tensor
        for name, tensor in module_state(device, module, dtype).items()
        if not rebuilt or tensor.device.type != device
    }
    if rebuilt:  # (its counters, as the module built at the caller's sizes has them)
        held = dict(original.named_buffers())
        for name, tensor in module.named_buffers():
            found = held.get(name)
            counter = _counter(found) if found is not None and tensor.dim() == 0 else None
            if counter is not None:
                state[name] = counter

    def run(thunk: Thunk) -> Any:
        with assignments_put_back((module,)):
            if not state:
                return thunk()
            with _reparametrize_module(module, state, strict=False):
                return thunk()

    return module, run


def refuse_script(module: torch.nn.Module) -> None:
    """A SpecError if ``module`` is or holds a TorchScript module (``torch.jit.script`` or
    ``torch.jit.trace``): its forward is TorchScript and its parameters slots of fixed type,
    so a dry run cannot put storage-less copies in their place."""
    for path, sub in module.named_modules():
        if isinstance(sub, torch.jit.ScriptModule):
            where = f"its submodule {path}" if path else type(module).__name__
            raise SpecError.at(
                "estimate()",
                f"{where} is a TorchScript module (torch.jit.script or torch.jit.trace), "
                "which a dry run cannot run",
                hint="estimate the module it was made from, or record() a real run",
            )


def lazy_on_meta(module: torch.nn.Module) -> torch.nn.Module:
    """``module``, or where a layer of it is lazy and not initialized yet (``nn.LazyLinear``
    before its first call) a copy of it on ``meta``, its uninitialized parameters and
    buffers left uninitialized there, for a call on meta inputs to initialize them as a
    first real call would (see :func:`initialize_lazy`); ``module`` stays as the caller has
    it (its tensors are not copied: the copy holds storage-less ones, tied ones tied)."""
    if not has_lazy(module):
        return module
    tensors = (*module.parameters(), *module.buffers())
    memo: dict[int, Any] = {}
    for tensor in tensors:
        if isinstance(tensor, UninitializedParameter | UninitializedBuffer):
            lazy: Any = type(tensor)  # (its stubs give it Parameter's constructor)
            memo[id(tensor)] = lazy(tensor.requires_grad, device="meta", dtype=tensor.dtype)
        elif isinstance(tensor, torch.nn.Parameter):
            meta = torch.empty_like(tensor, device="meta")
            memo[id(tensor)] = torch.nn.Parameter(meta, requires_grad=tensor.requires_grad)
        else:
            memo[id(tensor)] = torch.empty_like(tensor, device="meta")
    return copy.deepcopy(module, memo)


def has_lazy(module: torch.nn.Module) -> bool:
    """Whether a lazy layer of ``module`` is not initialized yet."""
    tensors = (*module.parameters(), *module.buffers())
    return any(isinstance(t, UninitializedParameter | UninitializedBuffer) for t in tensors)


def initialize_lazy(
    label: str, module: torch.nn.Module, call: Callable[..., Any], inputs: dict[str, Any]
) -> None:
    """Initialize the lazy layers of ``module`` (a copy on meta, see :func:`lazy_on_meta`)
    by one call of ``call`` on ``inputs``, meta tensors at the sizes given, before any dry
    run reads the shapes of its weights."""
    try:
        with torch.no_grad(), torch.device("meta"):  # (as a dry run: meta the default device)
            call(module, **inputs)
    except Exception as error:
        raise SpecError.at(
            f"estimate({label})",
            "its lazy layers cannot be initialized by a call at these sizes "
            f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})",
            hint="call the model once on a real input first, or give sizes it can run at",
        ) from error
    if has_lazy(module):
        raise SpecError.at(
            f"estimate({label})",
            "a lazy layer is not initialized by a call at these sizes (the call never reached it)",
            hint="call the model once on a real input first",
        )


def argument_modules(values: Sequence[Any], own: Any) -> list[torch.nn.Module]:
    """The modules among a call's other arguments (``f(model, ids)``), also inside a list,
    tuple or dict, each once and not ``own`` (the call's ``self``)."""
    found: dict[int, torch.nn.Module] = {}
    for value in values:
        items = value.values() if isinstance(value, dict) else value
        for item in items if isinstance(value, list | tuple | dict) else (value,):
            if isinstance(item, torch.nn.Module) and item is not own:
                found.setdefault(id(item), item)
    return list(found.values())


def with_modules(
    runner: Callable[[Thunk], Any],
    modules: Sequence[torch.nn.Module],
    device: str,
    dtype: torch.dtype | None,
) -> Callable[[Thunk], Any]:
    """``runner`` with each of ``modules`` taking part through storage-less copies of its
    parameters and buffers on ``device`` (a module given as an argument, as ``self`` is)."""
    if not modules:
        return runner
    for module in modules:
        refuse_script(module)
    states = [(module, module_state(device, module, dtype)) for module in modules]

    def run(thunk: Thunk) -> Any:
        with contextlib.ExitStack() as stack:
            for module, state in states:
                stack.enter_context(assignments_put_back((module,)))
                stack.enter_context(_reparametrize_module(module, state, strict=False))
            return runner(thunk)

    return run


def backward_hooks(values: Sequence[Any]) -> list[str]:
    """The hooks that run code in backward on the modules among ``values`` (and their
    submodules and tensors), and torch's global module hooks, each named: a dry run sees
    no backward, so their ops are not counted (``register_full_backward_hook``,
    ``register_full_backward_pre_hook``, a parameter's ``register_hook`` or
    ``register_post_accumulate_grad_hook``)."""
    from torch.nn.modules import module as torch_module

    found: list[str] = []
    if torch_module._global_backward_hooks or torch_module._global_backward_pre_hooks:
        found.append("global module backward hook")
    modules = [value for value in values if isinstance(value, torch.nn.Module)]
    modules += argument_modules(values, None)
    seen: set[int] = set()
    for root in modules:
        for name, module in root.named_modules():
            if id(module) in seen:
                continue
            seen.add(id(module))
            where = name or type(root).__name__
            if module._backward_hooks or module._backward_pre_hooks:
                found.append(f"backward hook of {where}")
            for tensor_name, tensor in (
                *module.named_parameters(recurse=False),
                *module.named_buffers(recurse=False),
            ):
                if tensor._backward_hooks or getattr(tensor, "_post_accumulate_grad_hooks", None):
                    found.append(f"gradient hook of {where}.{tensor_name}")
    return found
