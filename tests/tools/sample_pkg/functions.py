"""Module-level functions: one per case the import hook must handle."""

import functools
from collections.abc import Callable
from typing import Any, TypeVar, no_type_check

import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import typed_flops

F = TypeVar("F", bound=Callable[..., Any])

Vector = Float[Tensor, "n"]  # a type alias: found when the hint is resolved

calls_seen: list[str] = []


def logged(fn: F) -> F:
    """A ``functools.wraps``-based decorator that notes each call in ``calls_seen``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls_seen.append(fn.__name__)
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def linear(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    """``x @ w``: a contraction over ``d_in``."""
    return x @ w


def scale(v: Vector, factor: float) -> Vector:
    """Annotated through an alias only."""
    return v * factor


def first_rows(xs: list[Float[Tensor, "n d"]]) -> Float[Tensor, " d"]:
    """A tensor annotation nested in ``list[...]``."""
    return xs[0][0]


@torch.no_grad()
def no_grad_linear(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    """``@torch.no_grad()`` around a checked function."""
    return x @ w


@logged
def logged_linear(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    """A ``functools.wraps`` wrapper around a checked function."""
    return x @ w


@no_type_check
def unchecked(x: Float[Tensor, "batch d_in"]) -> Float[Tensor, "batch d_in"]:
    """``@no_type_check``: the hook leaves it alone."""
    return x.sum(dim=0)


@typed_flops(flops="7*n")
def already_decorated(v: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    """Decorated by hand with an option: the hook must not decorate it again."""
    return v + 1


def add(a: int, b: int) -> int:
    """Annotated, but with no jaxtyping annotation: checked with beartype's semantics
    (left alone with ``functions="tensors"``)."""
    return a + b


def make_inner() -> Callable[[Tensor], Tensor]:
    """A function defined inside a function is left undecorated (this one is checked)."""

    def inner(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return x

    return inner


async def async_double(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    """A coroutine function."""
    return 2 * x
