"""The three grammars typedflops reads, parsed without torch: jaxtyping dim strings
(:mod:`.dims`), einops patterns (:mod:`.patterns`) and ``flops=`` formulas (:mod:`.formula`).

The runtime and the mypy plugin both parse with this package, so one mistake gets one
wording on both sides: inner code raises :class:`Problem` (a short reason), and the runtime
wraps it in a ``SpecError``/``PatternError`` with its context, the plugin in a diagnostic
with its error code. Only the standard library and ``einops.parsing`` are imported here.
"""

from __future__ import annotations

__all__ = ["Problem"]


class Problem(Exception):
    """A short reason why a dim string, pattern or formula is wrong, and the axis at fault.

    >>> problem = Problem("axis 'c' is on one side only", axis="c")
    >>> problem.reason, problem.axis
    ("axis 'c' is on one side only", 'c')
    """

    def __init__(self, reason: str, axis: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.axis = axis
