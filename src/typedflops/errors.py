"""The error vocabulary, split by who is at fault.

``SpecError`` means the code is wrong (an annotation, a ``flops=`` formula, an einops
pattern, the dims given to ``estimate``). ``ContractError`` means a call is wrong (a tensor's
shape, dtype or device, or a non-tensor argument that its hint rejects).

Every error is raised once, with the reason on its first line and the context (function,
argument, bound dims) on the lines after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import einops
from jaxtyping import TypeCheckError

__all__ = [
    "ContractError",
    "DeviceError",
    "DtypeError",
    "PatternError",
    "ShapeError",
    "SpecError",
]


class ContractError(TypeCheckError):
    """A call broke the contract of a ``@typed_flops`` function.

    Attributes name what went wrong: ``function`` (the function's name), ``argument``
    (the parameter name, or ``"return"``), ``dim`` (the dimension at fault, if any),
    ``expected`` and ``actual`` (what was needed and what was given), and ``bindings``
    (the dims bound so far in this call, name to size).
    """

    def __init__(
        self,
        message: str,
        *,
        function: str | None = None,
        argument: str | None = None,
        dim: str | None = None,
        expected: Any = None,
        actual: Any = None,
        bindings: Mapping[str, Any] | None = None,
    ) -> None:
        # No super().__init__: BaseException.__new__ already keeps ``message`` as the
        # error's args, and torch.compile can trace this constructor, so that a contract
        # broken inside a compiled graph is reported with this message.
        self.function = function
        self.argument = argument
        self.dim = dim
        self.expected = expected
        self.actual = actual
        self.bindings: dict[str, Any] = dict(bindings or {})


class ShapeError(ContractError):
    """A tensor's shape does not match its annotation or the dims bound earlier in the call."""


class DtypeError(ContractError):
    """A tensor's dtype is not one its annotation allows."""


class DeviceError(ContractError):
    """The tensors of one call are on different devices."""


class SpecError(ValueError):
    """A specification is wrong: an annotation, a ``flops=`` formula, a pattern, estimate dims."""


class PatternError(SpecError, einops.EinopsError):
    """An einops pattern is malformed or does not fit the tensors it is applied to."""
