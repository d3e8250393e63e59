"""Type variables in hints, replaced by what beartype checks them against.

beartype checks a value of ``T = TypeVar("T", bound=Model)`` against ``Model`` (against the
union of its constraints, or not at all when it has neither), and resolves a bound written
as a string (``bound="Model"``, as a class's methods write ``def cpu(self: T) -> T``) in the
decorated function's module. The contract does the same before compiling its checks, where
the function's module is known.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["with_bounds"]


def with_bounds(hint: Any, globalns: Mapping[str, Any]) -> Any:
    """``hint`` with each type variable in it replaced by its bound, its constraints as a
    union, or ``Any``; a bound that names nothing in ``globalns`` yet (a class defined later
    in the module) is a NameError.

    >>> class Model: ...
    >>> T = TypeVar("T", bound="Model")
    >>> with_bounds(T, {"Model": Model}) is Model, with_bounds(list[T], {"Model": Model})
    (True, list[typedflops.contract.typevars.Model])
    >>> with_bounds(TypeVar("N", int, str), {}), with_bounds(TypeVar("U"), {})
    (typing.Union[int, str], typing.Any)
    >>> with_bounds(TypeVar("V", bound="Later"), {})
    Traceback (most recent call last):
    NameError: name 'Later' is not defined
    """
    if isinstance(hint, TypeVar):
        return _bound(hint, globalns)
    parameters = getattr(hint, "__parameters__", ())
    if not parameters or typing.get_origin(hint) is None:
        return hint
    if not all(isinstance(p, TypeVar) for p in parameters):
        return hint  # a ParamSpec or a TypeVarTuple: as it is
    try:
        return hint[tuple(_bound(p, globalns) for p in parameters)]
    except TypeError:
        return hint


def _bound(variable: Any, globalns: Mapping[str, Any]) -> Any:
    if variable.__bound__ is not None:
        found = _resolved({"bound": variable.__bound__}, globalns)
        return variable if found is None else found[0]
    if variable.__constraints__:
        named = {f"c{i}": c for i, c in enumerate(variable.__constraints__)}
        found = _resolved(named, globalns)
        return variable if found is None else typing.Union[tuple(found)]  # noqa: UP007
    return Any


def _resolved(hints: dict[str, Any], globalns: Mapping[str, Any]) -> list[Any] | None:
    """The hints, forward references resolved in ``globalns`` (a NameError if one names
    nothing there yet; None if one cannot be resolved otherwise)."""
    holder = types.SimpleNamespace(__annotations__=hints)
    try:
        found = typing.get_type_hints(holder, globalns=dict(globalns))
    except NameError:
        raise
    except Exception:
        return None
    return [found[name] for name in hints]
