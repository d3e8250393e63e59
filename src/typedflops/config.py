"""The off switch: ``TYPEDFLOPS_DISABLE=1`` and the nestable ``disabled()`` context manager."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["disabled", "enabled"]

#: ``TYPEDFLOPS_DISABLE=1`` at import: the default of every context, and the only switch
#: that compiled code sees (dynamo cannot read a ContextVar).
DISABLED_BY_ENVIRONMENT = os.environ.get("TYPEDFLOPS_DISABLE", "").strip().lower() in {
    "1",
    "true",
    "yes",
}

# A ContextVar, not a global: `disabled()` in one thread or asyncio task must not switch
# checks off in another.
disabled_flag: ContextVar[bool] = ContextVar("typedflops_disabled", default=DISABLED_BY_ENVIRONMENT)


def enabled() -> bool:
    """Whether ``@typed_flops`` functions check their contracts in the current context.

    >>> enabled()
    True
    >>> with disabled():
    ...     enabled()
    False
    """
    return not disabled_flag.get()


@contextlib.contextmanager
def disabled(off: bool = True) -> Iterator[None]:
    """Switch contract checks off (or back on with ``off=False``) inside the block.

    Nestable: the previous state is restored on exit, also when the block raises.
    The environment variable ``TYPEDFLOPS_DISABLE=1`` sets the default for the process.
    """
    token = disabled_flag.set(off)
    try:
        yield
    finally:
        disabled_flag.reset(token)
