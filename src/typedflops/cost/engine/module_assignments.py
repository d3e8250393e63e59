"""What a dry run assigns to the caller's modules, put back after it: ``self.last = y``, a
cache made on first use, a buffer registered in ``forward``. The caller's modules never
keep a dry run's storage-less tensors.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

__all__ = ["assignments_put_back"]


#: A module's attribute stores (parameters, buffers, submodules, its own attributes), each
#: with a copy of what it held.
Stores = list[tuple[dict[str, Any], dict[str, Any]]]


def _stores_of(module: torch.nn.Module) -> Stores:
    """``module``'s attribute stores as they are now (its own attributes last)."""
    held = (module._parameters, module._buffers, module._modules, module.__dict__)
    return [(store, dict(store)) for store in held]


def _put_back(stores: Stores) -> None:
    """Each store as it was, where it holds other objects now (compared by identity:
    ``==`` on a tensor is a tensor)."""
    for store, saved in stores:
        same = store.keys() == saved.keys() and all(store[k] is v for k, v in saved.items())
        if not same:
            store.clear()
            store.update(saved)


class _Touched(threading.local):
    """The modules a dry run in this thread assigned to, each with its stores as they were
    (None: no dry run here)."""

    kept: dict[int, tuple[torch.nn.Module, Stores]] | None = None


_touched = _Touched()
_module = torch.nn.Module
_ORIGINAL = {
    name: getattr(_module, name)
    for name in ("__setattr__", "__delattr__", "register_buffer", "register_parameter")
}
_installed = [0]
_install_lock = threading.Lock()


def _noting(name: str) -> Callable[..., Any]:
    original = _ORIGINAL[name]

    def method(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        kept = _touched.kept
        if kept is not None and id(self) not in kept and "_parameters" in self.__dict__:
            kept[id(self)] = (self, _stores_of(self))
        return original(self, *args, **kwargs)

    method.__name__ = name
    return method


_NOTING = {name: _noting(name) for name in _ORIGINAL}


@contextlib.contextmanager
def assignments_put_back(modules: Iterable[torch.nn.Module] = ()) -> Iterator[None]:
    """Put back, after the block (a dry run's body), what it assigned to any module that
    existed before it (``self.last = y``, a buffer registered in ``forward``, a global
    model's cache): ``modules`` (those a dry run swaps to storage-less copies, and their
    submodules) as they are now, the others as they were when first assigned to. Nested
    blocks join the outermost, which puts back; other threads' assignments go through
    untouched.

    >>> lin = torch.nn.Linear(2, 2)
    >>> with assignments_put_back():
    ...     lin.last = torch.empty(2, device="meta")
    ...     lin.register_buffer("cache", torch.empty(2, device="meta"))
    >>> hasattr(lin, "last"), "cache" in lin._buffers
    (False, False)
    """
    outermost = _touched.kept is None
    if outermost:
        with _install_lock:
            if _installed[0] == 0:
                for name, method in _NOTING.items():
                    setattr(_module, name, method)
            _installed[0] += 1
        _touched.kept = {}
    kept = _touched.kept
    assert kept is not None
    for module in modules:
        for sub in module.modules():
            if id(sub) not in kept:
                kept[id(sub)] = (sub, _stores_of(sub))
    if not outermost:
        yield
        return
    try:
        yield
    finally:
        _touched.kept = None
        for _, stores in kept.values():
            _put_back(stores)
        with _install_lock:
            _installed[0] -= 1
            if _installed[0] == 0:
                for name, method in _ORIGINAL.items():
                    setattr(_module, name, method)
