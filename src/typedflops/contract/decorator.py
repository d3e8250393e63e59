"""``typed_flops``: the decorator users write, on a function, a method, a property or a
dataclass."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

from .classes import typed_class
from .function import TypedFunction

__all__ = ["typed_flops"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T", bound=type)


@overload
def typed_flops(fn: type[T], /) -> type[T]: ...  # type: ignore[overload-overlap]


@overload
def typed_flops(fn: Callable[P, R], /) -> TypedFunction[P, R]: ...


@overload
def typed_flops(
    *, flops: str | None = None, name: str | None = None
) -> Callable[[Callable[P, R]], TypedFunction[P, R]]: ...


def typed_flops(fn: Any = None, /, *, flops: str | None = None, name: str | None = None) -> Any:
    """Check a function's jaxtyping contract on every call and give it a cost model.

    Bare (``@typed_flops``) or with options (``@typed_flops(flops="2*m*n*k", name="mm")``).
    Each call checks every parameter and the return value (shapes, dtypes, one device;
    other hints with beartype's semantics) before the body runs. ``f.formula``,
    ``f.estimate(**dims)`` and ``f.benchmark(*args)`` give its FLOPs, bytes and time.

    >>> import torch
    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> @typed_flops
    ... def linear(x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
    ...            ) -> Float[Tensor, "batch d_out"]:
    ...     return x @ w
    >>> linear(torch.ones(8, 4), torch.ones(4, 3)).shape
    torch.Size([8, 3])
    >>> linear.formula
    2*batch*d_in*d_out
    """

    if fn is not None:
        return _decorate(fn, flops, name)
    return functools.partial(_decorate, flops=flops, name=name)


def _decorate(function: Any, flops: str | None, name: str | None) -> Any:
    """What ``typed_flops`` returns for ``function`` (a module-level function, not a
    closure: a closure calling itself would leave a reference cycle per decoration)."""
    if isinstance(function, TypedFunction):
        return function  # already decorated: one contract, checked once
    if isinstance(function, type):
        return typed_class(function)
    if isinstance(function, (classmethod, staticmethod)):
        return type(function)(_decorate(function.__func__, flops, name))
    if isinstance(function, property):
        fget, fset, fdel = (
            None if accessor is None else _decorate(accessor, flops, name)
            for accessor in (function.fget, function.fset, function.fdel)
        )
        return property(fget, fset, fdel, function.__doc__)
    return TypedFunction(function, flops=flops, name=name)
