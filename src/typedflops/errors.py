"""The error vocabulary, split by who is at fault.

``SpecError`` means the code is wrong (an annotation, a ``flops=`` formula, an einops
pattern, the dims given to ``estimate``). ``ContractError`` means a call is wrong (a tensor's
shape, dtype or device, or a non-tensor argument that its hint rejects).

Every error is raised once, with the reason on its first line and the context (function,
argument, bound dims) on the lines after it. A ``SpecError`` message is built in one place,
:meth:`SpecError.at`: where the mistake was written, then what is wrong with it, then (if there
is one) what to do instead, each also kept as an attribute for tools and tests to read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

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

_Spec = TypeVar("_Spec", bound="SpecError")


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
    """A specification is wrong: an annotation, a ``flops=`` formula, a pattern, estimate dims.

    Attributes name the mistake: ``where`` (what was written wrong, as the message's first
    words: ``"f()"``, ``'annotation "batch d_in"'``; None if the reason says it all),
    ``reason`` (what is wrong with it), ``hint`` (what to do instead, or None) and
    ``context`` (the lines after the first: shapes, the offending axis). Build one with
    :meth:`at`; a ``SpecError(message)`` made by hand has its whole message as ``reason``.
    """

    def __init__(self, message: str = "") -> None:
        # No super().__init__, as in ContractError: BaseException.__new__ keeps ``message``
        # as the error's args, which is all that unpickling passes back to this constructor
        # (the attributes come back through the instance's __dict__).
        self.where: str | None = None
        self.reason = message
        self.hint: str | None = None
        self.context: tuple[str, ...] = ()

    @classmethod
    def at(
        cls: type[_Spec],
        where: str | None,
        reason: str,
        *,
        hint: str | None = None,
        context: Iterable[str] = (),
    ) -> _Spec:
        """The error for ``reason`` at ``where``: ``"{where}: {reason}; {hint}"``, then each
        line of ``context`` indented on a line of its own.

        >>> error = SpecError.at('annotation "b  c"', "two spaces", hint="write one")
        >>> str(error)
        'annotation "b  c": two spaces; write one'
        >>> error.where, error.reason, error.hint
        ('annotation "b  c"', 'two spaces', 'write one')
        >>> print(PatternError.at('rearrange "a -> a a"', "a twice", context=["shapes: (2,)"]))
        rearrange "a -> a a": a twice
          shapes: (2,)
        """
        lines = tuple(context)
        error = cls(
            (f"{where}: " if where else "")
            + reason
            + (f"; {hint}" if hint else "")
            + "".join(f"\n  {line}" for line in lines)
        )
        error.where, error.reason, error.hint, error.context = where or None, reason, hint, lines
        return error


class PatternError(SpecError, einops.EinopsError):
    """An einops pattern is malformed or does not fit the tensors it is applied to."""


class UnresolvedHintError(SpecError, NameError):
    """A type hint names something that is not defined (yet): the decorator compiles the
    contract again at the first call, and raises this if the name is still unknown."""


class DryRunError(SpecError):
    """A body that a dry run on shapes cannot go through: what it computes depends on its
    tensors' values (a boolean mask, ``nonzero``, ``.item()``, an ``if`` on a tensor), its
    tensors are too large for torch to describe, or it runs an op torch has no kernel for on
    shapes alone (a strided nested tensor built from a list). ``record()`` on a real run
    counts it.

    ``reads_values`` names the op that needed values and the user's line that ran it
    (``"nonzero (what x[mask] runs) at model.py:12"``); None for the other two."""

    reads_values: str | None = None


class UsageError(Exception):
    """A command line that cannot run: reported as one line on stderr, exit status 2."""


class BranchOnSizes(TypeError):
    """Raised by a rule given sizes as formulas where its count branches on them (a CPU's
    flash attention computes whole blocks of 512 keys, so with a causal mask its pairs are
    piecewise in the lengths): the op's counts are fitted instead, and the formula found
    is not exact (it may hold only on the side of a threshold the runs were on)."""


class NotPolynomial(TypeError):
    """Raised by a rule given sizes as formulas where its count is no polynomial in them
    (adaptive pooling of n into o reads n + o - gcd(n, o) elements an axis): the count
    stays a number at the sizes it ran at, not exact, never a polynomial fitted to a few
    sizes that misses the others."""
