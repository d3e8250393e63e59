"""What an op gives on ``meta``, kept by what it was given: a dry run of a model whose blocks
repeat runs each of torch's meta kernels once per distinct call, not once per block.

Many of torch's meta kernels are Python (references and decompositions, a few milliseconds
an op): a dry run of a 1,000-block model ran them 6,000 times per size. A call is known by
its op, its arguments (each tensor by its shape, strides, storage offset and dtype; other
values as they are), the default dtype (a Python float's type) and the grad and inference
modes; its outputs are rebuilt
as new meta tensors of the shapes, strides and dtypes it gave. Only what that rebuilds
exactly is kept: ops on plain dense meta tensors that write nothing, return no view and
return only new dense tensors (so, as a kernel's own outputs, they share no storage with
anything).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["cached_outputs", "keep_outputs", "meta_key"]

Key = tuple[Any, ...]
Layout = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]

_KEPT: dict[Key, tuple[bool, tuple[Layout, ...]]] = {}  # (a tuple returned, its layouts)
_LIMIT = 8192
_PLAIN = torch.Tensor
_ARGUMENTS = (torch.Tensor, torch.nn.Parameter)  # (a parameter is a plain tensor to kernels)
_META = torch.device("meta")
_OPS: dict[Any, bool] = {}


def _plain_op(func: torch._ops.OpOverload) -> bool:
    """Whether ``func`` writes none of its arguments and returns no alias of them."""
    known = _OPS.get(func)
    if known is None:
        schema = func._schema
        known = not func.is_view and all(
            a.alias_info is None for a in (*schema.arguments, *schema.returns)
        )
        _OPS[func] = known
    return known


def _value_key(value: Any) -> Any:
    """A hashable stand-in for an argument, or None where the call is not kept."""
    if type(value) in _ARGUMENTS:
        if value.device != _META or value.layout is not torch.strided:
            return None
        return (value.shape, value.stride(), value.storage_offset(), value.dtype)
    if isinstance(value, torch.Tensor):
        return None  # a subclass (nested, jagged, DTensor, fake) answers for itself
    if isinstance(value, (list, tuple)):
        parts = [_value_key(item) for item in value]
        if any(part is None and item is not None for part, item in zip(parts, value, strict=True)):
            return None
        return (type(value), *parts)
    if value is None or isinstance(
        value, (bool, int, float, complex, str, torch.dtype, torch.device, torch.layout)
    ):
        return (type(value), value)
    if isinstance(value, torch.memory_format):
        return (torch.memory_format, str(value))
    return None  # a SymInt, a generator, an object of the user's: run the kernel


def meta_key(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Key | None:
    """The key of a call on meta tensors whose outputs can be rebuilt, or None."""
    if not _plain_op(func):
        return None
    parts: list[Any] = [func]
    tensors = False
    for value in args:  # (a real run's op stops at its first real tensor, reading nothing else)
        part = _value_key(value)
        if part is None and value is not None:
            return None
        tensors = tensors or _holds_tensor(value)
        parts.append(part)
    if not tensors:
        return None  # a factory reads more than its arguments
    for name, value in sorted(kwargs.items()):
        part = _value_key(value)
        if part is None and value is not None:
            return None
        parts.append((name, part))
    modes = (torch.get_default_dtype(), torch.is_grad_enabled(), torch.is_inference_mode_enabled())
    return (*parts, modes)


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value)


def cached_outputs(key: Key) -> Any:
    """New meta tensors like the outputs the call of ``key`` gave, or None if unknown."""
    kept = _KEPT.get(key)
    if kept is None:
        return None
    several, layouts = kept
    if several:
        return tuple(_build(layout) for layout in layouts)
    return _build(layouts[0])


def keep_outputs(key: Key, out: Any) -> None:
    """Remember what the call of ``key`` gave, where it is only new dense meta tensors."""
    several = type(out) is tuple
    outputs = out if several else (out,)
    if not outputs or not all(type(t) is _PLAIN for t in outputs):
        return
    layouts = [_layout(t) for t in outputs]
    if len({id(t) for t in outputs}) != len(outputs) or None in layouts:
        return
    if len(_KEPT) >= _LIMIT:
        _KEPT.clear()
    _KEPT[key] = (several, tuple(layout for layout in layouts if layout is not None))


def _layout(tensor: torch.Tensor) -> Layout | None:
    if tensor.device != _META or tensor.layout is not torch.strided:
        return None
    if tensor.storage_offset() != 0:
        return None  # (a new tensor starts its storage)
    return (tuple(tensor.shape), tensor.stride(), tensor.dtype)


def _build(layout: Layout) -> torch.Tensor:
    shape, stride, dtype = layout
    return torch.empty_strided(shape, stride, dtype=dtype, device=_META)
