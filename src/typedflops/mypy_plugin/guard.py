"""A hook that fails gives what mypy gives without the plugin: never a crash of mypy.

Every hook the plugin hands mypy is wrapped here; an exception inside it (a mypy internal
the plugin misread, a node it never met) makes that one call, annotation or signature
unknown to the plugin, as if it had no hook. ``TYPEDFLOPS_MYPY_DEBUG=1`` in the
environment lets the exception through instead (the plugin's own tests set it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from mypy.errors import CompileError

__all__ = ["debugging", "guarded"]

Context = TypeVar("Context")
Result = TypeVar("Result")


def debugging() -> bool:
    """Whether a failing hook should raise (``TYPEDFLOPS_MYPY_DEBUG=1``)."""
    return os.environ.get("TYPEDFLOPS_MYPY_DEBUG") == "1"


def guarded(
    hook: Callable[[Context], Result], fallback: Callable[[Context], Result]
) -> Callable[[Context], Result]:
    """``hook``, or ``fallback`` (what mypy does without it) when ``hook`` raises."""

    def run(ctx: Context) -> Result:
        try:
            return hook(ctx)
        except CompileError:
            raise  # mypy's own way to stop on a blocking error
        except Exception:
            if debugging():
                raise
            return fallback(ctx)

    return run
