"""The names of the rows a user's torch calls form: :class:`GroupingMode`, a torch-function
mode under which each top-level torch call (``x @ w``, ``F.softmax``) names the ``aten``
ops it runs, so that they form one row; on ``meta`` tensors, it runs a call as the device
a dry run stands for would (see :mod:`.kernels`), and keeps the values of a constant made
of Python data (see :mod:`.known_values`).
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import torch
from torch.overrides import TorchFunctionMode, resolve_name

from .events import Group, _group, new_serial
from .kernels import on_target
from .known_values import FROM_DATA, KnownValues

_TOLIST = torch.Tensor.tolist

__all__ = ["GroupingMode"]

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter


class Counter(Protocol):
    """What of :class:`.counter.CountingMode` the names of rows read."""

    paused: bool
    target: str | None
    known: KnownValues | None


def _words(text: str) -> frozenset[str]:
    """A set of names written as words (easier to read and extend than a list)."""
    return frozenset(text.split())


_ARITHMETIC_DUNDERS = _words(
    """
    add sub mul truediv floordiv mod pow matmul and or xor lshift rshift
    """
)

# Metadata and conversions read through the Python API: never a group of their own.
_PASS_THROUGH = _words(
    """
    __get__ __set__ size dim ndimension numel nelement stride storage_offset is_contiguous
    is_floating_point is_complex element_size data_ptr __len__ __repr__ __format__ __str__
    __hash__ __bool__ __index__ __int__ __float__ __iter__ __contains__ __reduce_ex__
    __deepcopy__ __setstate__ get_device tolist item untyped_storage storage requires_grad_
    register_hook retain_grad is_shared is_pinned __array__ __dlpack__ _is_view
    """
)


@functools.lru_cache(maxsize=4096)
def _group_name(func: Any) -> str | None:
    raw = str(getattr(func, "__name__", ""))
    if raw in _PASS_THROUGH:
        if raw == "__get__":  # a property such as `x.T` or `x.mT`: named after it
            owner = getattr(func, "__self__", None)
            name = str(getattr(owner, "__name__", ""))
            return name if name in ("T", "mT", "H", "mH", "real", "imag") else None
        return None
    name = raw
    if raw.startswith("__") and raw.endswith("__"):
        name = raw[2:-2]
        if name[:1] in "ri" and name[1:] in _ARITHMETIC_DUNDERS:
            name = name[1:]
    elif raw.endswith("_") and not raw.startswith("_"):
        name = raw[:-1]
    if not name:
        try:
            name = resolve_name(func) or repr(func)
        except Exception:
            name = repr(func)
    return name


class GroupingMode(TorchFunctionMode):
    """Names each top-level torch call, so its ``aten`` events form one row; on ``meta``
    tensors, runs a call as the device a dry run stands for would (see :mod:`.kernels`)."""

    def __init__(self, counter: Counter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        if func is _TOLIST and self.counter.known is not None:
            values = self.counter.known.of(args[0]) if args else None
            if values is not None:  # (a meta tensor whose values the shapes fix)
                return values.tolist()  # (read as a CPU tensor's: no op runs)
        out = self._grouped(func, types, args, kwargs)
        if func in FROM_DATA and self.counter.known is not None:
            self.counter.known.from_data(func, args, kwargs, out)  # (which no op shows)
        return out

    def _grouped(self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.counter.paused or _group.get() is not None:
            return func(*args, **kwargs)
        name = self.name(func)
        target = self.target(func, args, name)
        if name is None:
            if target is None:
                return func(*args, **kwargs)
            return on_target(target, func, args, kwargs)
        plain = all(kind is _Tensor or kind is _Parameter for kind in types)
        token = _group.set(Group(name, None, new_serial(), plain))
        try:
            if target is not None:
                return on_target(target, func, args, kwargs)
            return func(*args, **kwargs)
        finally:
            _group.reset(token)

    def name(self, func: Any) -> str | None:
        """The name of the row a call's ops form (None: a call not named, such as reading
        an attribute)."""
        try:
            return _group_name(func)
        except TypeError:  # an unhashable callable
            return None

    def target(self, func: Any, args: tuple[Any, ...], name: str | None) -> str | None:
        """The device type whose kernels a call on meta tensors runs as, if any."""
        return self.counter.target if name is not None else None
