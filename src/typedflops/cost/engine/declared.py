"""A ``flops=`` formula checked at a recorded call's argument sizes before its body runs: a
count that would be negative or not a whole number there is a SpecError raised before any
of the body's work is done (a formula that names a dim only the return value binds is
checked once the body returned, by :func:`.rules.declared_flops`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...contract.function import CheckedFunction
from .fit import Size, size_value
from .probes import call_dims
from .rules import declared_flops, formula_names

__all__ = ["check_declared"]


def check_declared(
    function: CheckedFunction[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    sizes: Mapping[str, Size],
) -> None:
    """Evaluate ``function``'s ``flops=`` formula at the sizes its arguments bound (and its
    module's own), where they give every dim it names; a SpecError where that count is
    negative or not a whole number."""
    formula = function.declared
    assert formula is not None
    names = formula_names(formula)
    if not names <= sizes.keys():  # (the module's own sizes, ``...``)
        sizes = call_dims(function, args, kwargs, sizes)
    if names <= sizes.keys():
        shown = {n: size_value(v) for n, v in sizes.items() if n in names}
        declared_flops(function.name, formula, shown)
