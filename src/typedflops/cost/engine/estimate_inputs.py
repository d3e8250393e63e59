"""What ``estimate()`` refuses in the inputs it is asked to build, before any dry run: a
dtype an annotation cannot take, a tensor parameter given a value, ``*xs`` left empty, an
axis written ``_`` (any size: no size to build it at)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from ...contract.annotation import AxisKind, TensorSpec
from ...contract.compiled import TensorParameter
from ...errors import SpecError
from ...text import dtype_name

__all__ = ["dtype_fits", "no_anonymous_axis", "requested_by_name", "variadic_given"]


def dtype_fits(function: str, dtype: torch.dtype, parameters: list[TensorParameter]) -> None:
    """``dtype`` is the dtype of the floating (and complex) inputs built: one whose
    annotation takes such values but not this dtype (``Float[...]`` for ``complex64``,
    ``Float32[...]`` for ``bfloat16``) would be built in another, and counted so, silently:
    a SpecError. Inputs of integers or booleans (``Int[...]`` ids) stay as they are."""
    for p in parameters:
        allowed = p.spec.dtypes
        if allowed is None or dtype in allowed:
            continue
        if any(kind.is_floating_point or kind.is_complex for kind in allowed):
            kind = "Complex" if dtype.is_complex else "Float"
            raise SpecError.at(
                f"{function}.estimate()",
                f"dtype={dtype_name(dtype)} does not fit {p.name}'s annotation "
                f"({p.spec.dtype_reason()}): it would be built as another dtype",
                hint=f"annotate {p.name} with a dtype class that takes it "
                f"({kind}[...] or Shaped[...]), or give another dtype",
            )


def requested_by_name(
    function: str, by_name: Mapping[str, TensorParameter], named: Mapping[str, Any]
) -> set[str]:
    """The Optional tensors ``named`` asks for (``targets=True``), or a SpecError for a
    tensor parameter named otherwise."""
    requested = set()
    for name, value in named.items():
        parameter = by_name[name]
        if value is True and parameter.defaults_to_none:
            requested.add(name)
            continue
        hint = (
            f"{name}=True builds it from its annotation instead of leaving it None"
            if parameter.defaults_to_none
            else "leave it out: estimate() builds it from its annotation"
        )
        raise SpecError.at(
            f"{function}.estimate()", f"{name}={value!r} names a tensor parameter", hint=hint
        )
    return requested


def variadic_given(function: str, signature: inspect.Signature, args: tuple[Any, ...]) -> None:
    """A SpecError for ``*xs: Float[Tensor, ...]`` left empty: its annotation gives each
    tensor's shape, not how many a call passes."""
    for index, (name, parameter) in enumerate(signature.parameters.items()):
        if (
            parameter.kind is parameter.VAR_POSITIONAL
            and len(args) <= index
            and "Tensor" in str(parameter.annotation)
        ):
            raise SpecError.at(
                f"{function}.estimate()",
                f"cannot build *{name}: its annotation gives each tensor's shape, not how many "
                "a call passes",
                hint="pass them positionally, on meta: "
                f"{function}.estimate(torch.empty(..., device='meta'), ...)",
            )


def no_anonymous_axis(function: str, name: str, spec: TensorSpec) -> None:
    """A SpecError for an axis written ``_`` (any size, never checked): no size to build."""
    for index, axis in enumerate(spec.axes):
        if axis.kind is AxisKind.ANONYMOUS:
            sized = " ".join("8" if a is axis else a.text for a in spec.axes)
            raise SpecError.at(
                f"{function}.estimate()",
                f"argument '{name}' ({spec.label}): axis {index} is anonymous "
                f"('{axis.text}', any size), so a dry run has no size to build it at",
                hint="name the dim in the annotation, or give the input with a size there: "
                f"typedflops.estimate({function}, {name}={spec.dtype_label}[Tensor, "
                f"'{sized}'], ...)",
            )
