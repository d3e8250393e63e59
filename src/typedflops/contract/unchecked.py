"""Functions checked as far as their hints allow, and what was left unchecked, said once.

A function decorated by hand with ``@typed_flops`` is refused at decoration when one of its
hints cannot be compiled (a :class:`~typedflops.errors.SpecError`): its author asked for the
check. A function the import hook decorates was written for jaxtyping and beartype, and
must never be refused for a hint typedflops does not check itself. Such a function is
*lenient* (:func:`check_leniently`): a hint that names something that never becomes defined
(a class imported under ``TYPE_CHECKING``) is left out of its contract, a tensor annotation
outside typedflops' grammar (``"min(a,b)"``) is checked by jaxtyping, and any other hint that
cannot be compiled leaves the function unchecked. Each of these is noted once
(:func:`note`), with the function and its file:line, and the pytest plugin lists the notes
at the end of a run.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "check_leniently",
    "compiling_leniently",
    "decorating",
    "is_decorating",
    "is_lenient",
    "lenient_compilation",
    "note",
    "notes",
    "place",
    "take_notes",
]

_lenient: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()
# Set while the import hook decorates a function: a name that is not defined yet may be a
# class defined later in its module, so the contract waits for the first call.
_decorating: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "typedflops_decorating", default=False
)
# Set while a lenient function's contract is compiled.
_compiling: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "typedflops_lenient_compilation", default=False
)
_notes: dict[str, None] = {}


def check_leniently(fn: Callable[..., Any]) -> None:
    """Mark ``fn`` (the plain function) as checked as far as its hints allow."""
    _lenient.add(fn)


def is_lenient(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` was marked by :func:`check_leniently`."""
    try:
        return fn in _lenient
    except TypeError:  # not weakly referable: never marked
        return False


@contextlib.contextmanager
def decorating() -> Iterator[None]:
    """While the import hook decorates a function (its hints may name later classes)."""
    token = _decorating.set(True)
    try:
        yield
    finally:
        _decorating.reset(token)


def is_decorating() -> bool:
    """Whether the import hook is decorating a function right now."""
    return _decorating.get()


@contextlib.contextmanager
def lenient_compilation() -> Iterator[None]:
    """While a lenient function's contract is compiled."""
    token = _compiling.set(True)
    try:
        yield
    finally:
        _compiling.reset(token)


def compiling_leniently() -> bool:
    """Whether the contract being compiled is a lenient function's."""
    return _compiling.get()


def place(fn: Callable[..., Any]) -> str:
    """``path/to/module.py:12``: where ``fn`` is defined (its first line)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return getattr(fn, "__module__", None) or "?"
    return f"{code.co_filename}:{code.co_firstlineno}"


def note(text: str) -> None:
    """Note that something was left unchecked (each distinct text once)."""
    _notes[text] = None


def notes() -> list[str]:
    """What was noted so far, in order."""
    return list(_notes)


def take_notes() -> list[str]:
    """What was noted so far; the notes are then forgotten."""
    found = list(_notes)
    _notes.clear()
    return found
