"""The cost model of a checked function: its cost at given sizes and its forward FLOPs as
a formula, from dry runs on fake tensors (nothing is allocated)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch

from ..contract.annotation import ELLIPSIS
from ..contract.compiled import Contract
from ..contract.function import CheckedFunction
from ..errors import DryRunError, SpecError
from ..syntax.dims import with_ellipsis
from .engine.dry_modules import backward_hooks
from .engine.dryrun import measure
from .engine.module_sizes import held_dims
from .engine.probes import estimate_probe, method_needs_object
from .types import Cost

__all__ = ["estimate", "estimate_options", "formula_at", "probe_sizes"]


def estimate(
    function: CheckedFunction[..., Any],
    args: tuple[Any, ...],
    dims: Mapping[str, Any],
    dtype: torch.dtype | None = None,
    grad: Sequence[str] = (),
) -> Cost:
    """The cost of one call of ``function`` at the sizes ``dims`` (see
    :meth:`typedflops.TypedFunction.estimate`)."""
    grad = estimate_options(f"{function.name}.estimate()", dtype, grad)
    try:
        cost = measure(estimate_probe(function, args, dims, dtype, tuple(grad)))
    except SpecError as error:
        # a model moved to another dtype (``model.double()``) whose body fails on float32
        # inputs: they are built at its dtype, as a real call passes them
        held = modules_dtype(args) if dtype is None else None
        if held is None:
            raise
        try:
            cost = measure(estimate_probe(function, args, dims, held, tuple(grad)))
        except SpecError:
            raise error from None
    hooks = backward_hooks(args)  # (code that runs in backward, which no dry run sees)
    if hooks:
        cost = dataclasses.replace(cost, uncounted=tuple(dict.fromkeys((*cost.uncounted, *hooks))))
    return cost


def modules_dtype(args: tuple[Any, ...]) -> torch.dtype | None:
    """The floating-point dtype every parameter and buffer of the modules among ``args``
    holds, where it is one and not the default (a model moved to float64 or bfloat16,
    whose body fails on float32 inputs: they are built at it); else None."""
    found = {
        tensor.dtype
        for arg in args
        if isinstance(arg, torch.nn.Module)
        for tensor in (*arg.parameters(), *arg.buffers())
        if tensor.is_floating_point()
    }
    if len(found) != 1:
        return None
    (dtype,) = found
    return None if dtype == torch.get_default_dtype() else dtype


def estimate_options(where: str, dtype: Any, grad: str | Sequence[str]) -> tuple[str, ...]:
    """``grad`` as names (one name given as a string is that name, not its letters), once
    ``dtype`` is known to be a ``torch.dtype`` or None."""
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise SpecError.at(
            where,
            f"dtype={dtype!r} is not a torch.dtype",
            hint=f"write dtype=torch.{dtype}" if isinstance(dtype, str) else "e.g. torch.bfloat16",
        )
    return (grad,) if isinstance(grad, str) else tuple(grad)


def formula_at(
    function: CheckedFunction[..., Any],
    objects: tuple[Any, ...] = (),
    sizes: Mapping[str, Any] | None = None,
) -> sympy.Expr:
    """Forward FLOPs of ``function`` as a formula, fitted by dry runs at ``sizes`` (probe
    sizes when None; a method's object in ``objects`` fixes the dims it holds). A formula
    that holds at those sizes only (its Cost is not exact) comes with a warning."""
    contract = function.contract
    if contract.takes_self and not objects:
        raise method_needs_object(function.name)
    if sizes is None:
        held = held_dims(objects[0]) if objects else {}
        sizes = {k: v for k, v in probe_sizes(contract).items() if k not in held}
    try:
        cost = estimate(function, objects, sizes)
    except DryRunError:
        raise  # no sizes would do: it says what to do instead
    except Exception as exc:
        shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
        reason = str(exc).splitlines()[0] if str(exc) else ""
        raise SpecError.at(
            f"{function.name}()",
            f"cannot derive its formula by a dry run at sizes {shown} "
            f"({type(exc).__name__}: {reason})",
            hint=f"call {function.name}.estimate(...) with sizes the body accepts first, or "
            "pass flops= to @typed_flops",
        ) from None
    if not cost.forward.exact:
        shown = ", ".join(f"{k}={v}" for k, v in cost.dims.items())
        warnings.warn(
            f"{function.name}.formula holds at {shown} only: dry runs at other sizes gave "
            "counts no formula fitted (Cost.exact is False)",
            stacklevel=3,
        )
    return cost.formula


# Sizes for a formula when no sizes are given: distinct multiples of 24, so that the
# usual splits (heads of 2, 3, 4, 6, 8 or 12) divide them and no two dims coincide.
_PROBE_SIZES = tuple(24 * k for k in range(1, 40))


def probe_sizes(contract: Contract) -> dict[str, Any]:
    """Sizes for every dim the required tensor parameters bind (``...`` and ``*name``: one
    axis)."""
    sizes: dict[str, Any] = {}
    parameters = [p for p in contract.tensor_parameters() if not p.defaults_to_none]
    names: list[str] = []
    variadic: set[str] = set()
    for p in parameters:
        names.extend(with_ellipsis(p.spec.bindable_names, p.spec.has_ellipsis, ELLIPSIS))
        variadic.update(with_ellipsis(p.spec.variadic_names, p.spec.has_ellipsis, ELLIPSIS))
    for name, size in zip(dict.fromkeys(names), _PROBE_SIZES, strict=False):
        sizes[name] = (size,) if name in variadic else size
    return sizes
