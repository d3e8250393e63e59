"""einops' ``einsum``, ``reduce``, ``rearrange`` and ``repeat``, checked and costed.

Each op takes einops' arguments and returns einops' result (the same torch kernels in the
same order, so bit for bit; einsum calls the kernel as ``torch.einsum`` does, without its
Python wrapper), and adds three things:

- a bad pattern raises :class:`~typedflops.PatternError` (a ``SpecError`` that is also an
  ``einops.EinopsError``) naming the pattern, the input shapes and the offending axis, before
  anything runs;
- inside a ``@typed_flops`` call, an axis named like a dim of the call must have the size the
  call bound (a :class:`~typedflops.ShapeError` naming both origins otherwise);
- inside ``record()`` (or ``f.estimate``), the kernels it runs are counted as one op named
  after it, with its pattern (the conventions are in ``typedflops.cost.engine.rules``). A 3+
  operand einsum runs pairwise along the FLOP-minimal order (opt_einsum "optimal" for up to
  4 operands, "greedy" beyond), so its count is the count of what ran.

Patterns are parsed once per (pattern, operand count or rank) and laid out once per shapes.
Under ``torch.compile`` the traced code calls einops itself (no checks, no costs), so a
compiled graph never raises on valid input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal, TypeVar, cast, overload

import einops
import torch
from torch.overrides import has_torch_function

from ..contract.function import counting_frame
from ..contract.scope import CallState, call_scope, is_compiling, violation
from ..cost.engine.events import group
from ..errors import ShapeError
from ..text import shape_text
from .plans import (
    EinsumLayout,
    EinsumPlan,
    Problem,
    einsum_layout,
    einsum_plan,
    pattern_error,
    transform_layout,
    transform_plan,
)

__all__ = ["Reduction", "einsum", "rearrange", "reduce", "repeat"]

T = TypeVar("T", bound=torch.Tensor)

Reduction = (
    Literal["min", "max", "sum", "mean", "prod", "any", "all"]
    | Callable[[torch.Tensor, tuple[int, ...]], torch.Tensor]
)


def _bound_error(
    call: CallState,
    op: str,
    pattern: str,
    name: str,
    bound: int,
    size: int,
    where: str,
    detail: str,
) -> ShapeError:
    origin = call.origin_line(name) or f"{name}={bound} is bound in this call"
    return violation(
        ShapeError,
        call,
        f'{op} "{pattern}": {where}',
        f"has {name}={size}{detail} but {origin}",
        dim=name,
        expected=bound,
        actual=size,
        argument=where,
    )


def _check_einsum_bound(
    call: CallState, pattern: str, layout: EinsumLayout, shapes: Sequence[tuple[int, ...]]
) -> None:
    sizes = call.sizes
    for name, found in layout.occurrences.items():
        bound = sizes.get(name)
        if type(bound) is not int:
            continue  # unbound, or a variadic dim's tuple of sizes
        for index, axis, size in found:
            # Size 1 broadcasts in torch.einsum: not a mismatch.
            if size != bound and size != 1:
                raise _bound_error(
                    call,
                    "einsum",
                    pattern,
                    name,
                    bound,
                    size,
                    f"operand {index + 1}",
                    f" (shape {shape_text(shapes[index])}, axis {axis})",
                )


# What torch.einsum calls for one or two operands (every call here: a 3+ operand einsum runs
# pairwise), without the work its Python wrapper does again on every call (an import
# statement, parsing its arguments), which is most of a small einsum's time: the kernel is
# the same, so results are bit for bit einops'. Operands that override torch functions, or
# an active TorchFunctionMode, go through torch.einsum itself.
_raw_einsum: Callable[[str, tuple[torch.Tensor, ...]], torch.Tensor] = torch._VF.einsum  # type: ignore[attr-defined]


def _contract(equation: str, operands: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``torch.einsum(equation, *operands)`` for one or two operands."""
    if has_torch_function(operands):
        return torch.einsum(equation, *operands)
    return _raw_einsum(equation, operands)


# A call's plan and layout by (pattern, shapes): one lookup on the hot path.
_LAID_OUT: dict[tuple[str, tuple[torch.Size, ...]], tuple[EinsumPlan, EinsumLayout]] = {}
_LAID_OUT_LIMIT = 4096


def _run_einsum(
    plan: EinsumPlan, layout: EinsumLayout, tensors: tuple[torch.Tensor, ...]
) -> torch.Tensor:
    if not layout.steps:
        return _contract(plan.equation, tensors)  # exactly what einops runs
    operands = list(tensors)
    for step in layout.steps:
        picked = tuple([operands[i] for i in step.operands])
        for i in sorted(step.operands, reverse=True):
            del operands[i]
        operands.append(_contract(step.equation, picked))
    return operands[0]


@overload
def einsum(tensor: T, pattern: str, /) -> T: ...
@overload
def einsum(tensor1: T, tensor2: T, pattern: str, /) -> T: ...
@overload
def einsum(tensor1: T, tensor2: T, tensor3: T, pattern: str, /) -> T: ...
@overload
def einsum(tensor1: T, tensor2: T, tensor3: T, tensor4: T, pattern: str, /) -> T: ...
@overload
def einsum(*tensors_and_pattern: torch.Tensor | str) -> torch.Tensor: ...
def einsum(*tensors_and_pattern: torch.Tensor | str) -> torch.Tensor:
    """einops.einsum: the tensors, then a pattern with named axes.

    ``output[out axes] = sum over the other axes of the product of the operands``. Each
    operand's shape must match its axes (``...`` takes any number of leading, middle or
    trailing axes); an axis has one size in every operand (or 1, which broadcasts).
    A 3+ operand einsum runs pairwise along the FLOP-minimal order at these sizes.

    Args:
        *tensors_and_pattern: the operands, of shapes given by the pattern's operand axes,
            followed by the pattern, e.g. ``"batch d_in, d_in d_out -> batch d_out"``.

    Returns:
        A tensor with the pattern's output axes.

    >>> x, w = torch.ones(8, 16), torch.ones(16, 4)
    >>> einsum(x, w, "batch d_in, d_in d_out -> batch d_out").shape
    torch.Size([8, 4])
    >>> einsum(torch.eye(3), "i i ->")  # a trace
    tensor(3.)
    >>> from typedflops import record
    >>> with record() as rec:
    ...     _ = einsum(x, w, "batch d_in, d_in d_out -> batch d_out")
    >>> rec.total.flops  # 2 * 8 * 16 * 4
    1024
    """
    if is_compiling():
        # Traced code runs einops itself, which registers its ops with dynamo; the checks
        # and costs belong to eager calls (a compiled graph must not raise on valid input).
        return einops.einsum(*tensors_and_pattern)
    count = len(tensors_and_pattern) - 1  # operands
    if count < 1:
        raise pattern_error(
            "einsum", "", [], "einsum takes the tensors (at least one), then the pattern"
        )
    pattern = tensors_and_pattern[count]
    tensors = cast(tuple[torch.Tensor, ...], tensors_and_pattern[:count])
    if not isinstance(pattern, str):
        raise pattern_error("einsum", "?", [], "the last argument must be the pattern string")
    try:
        shapes = (
            (tensors[0].shape, tensors[1].shape)  # (the usual call, built without a loop)
            if count == 2
            else tuple([tensor.shape for tensor in tensors])
        )
    except AttributeError:
        raise TypeError(
            "einsum: every argument before the pattern must be a torch.Tensor"
        ) from None
    call = call_scope.get()
    laid_out = _LAID_OUT.get((pattern, shapes))
    if laid_out is None:
        try:
            plan = einsum_plan(pattern, count)
            layout = einsum_layout(plan, shapes)
        except Problem as problem:
            function = call.function if call else None
            raise pattern_error(
                "einsum", pattern, shapes, problem.reason, problem.axis, function
            ) from None
        if len(_LAID_OUT) >= _LAID_OUT_LIMIT:
            _LAID_OUT.clear()
        _LAID_OUT[pattern, shapes] = plan, layout
    else:
        plan, layout = laid_out
    if call is not None and call.sizes:
        _check_einsum_bound(call, pattern, layout, shapes)
    if layout.conflict is not None:
        raise pattern_error(
            "einsum", pattern, shapes, *layout.conflict, function=call.function if call else None
        ) from None
    if counting_frame.get() is None:
        if not layout.steps:  # (the usual call, without a frame of its own)
            return _contract(plan.equation, tensors)
        return _run_einsum(plan, layout, tensors)
    with group("einsum", pattern):
        return _run_einsum(plan, layout, tensors)


def _transform(
    op: str,
    tensor: torch.Tensor | Sequence[torch.Tensor],
    pattern: str,
    reduction: Reduction | str,
    axes_lengths: Mapping[str, int],
) -> torch.Tensor:
    if is_compiling():  # see einsum: traced code runs einops itself
        stacked = tensor if isinstance(tensor, torch.Tensor) else list(tensor)
        return einops.reduce(stacked, pattern, reduction, **axes_lengths)
    if not isinstance(tensor, torch.Tensor):
        tensor = torch.stack(list(tensor))  # as einops does with a list of tensors
    operation = "callable" if callable(reduction) else str(reduction)
    lengths = tuple(axes_lengths.items())
    shape = tuple(tensor.shape)
    call = call_scope.get()
    function = call.function if call else None
    try:
        plan = transform_plan(pattern, operation, tuple(axes_lengths), len(shape))
        layout = transform_layout(plan, shape, lengths)
    except Problem as problem:
        raise pattern_error(op, pattern, [shape], problem.reason, problem.axis, function) from None
    if call is not None and call.sizes:
        for name in plan.named & call.sizes.keys():
            bound, size = call.sizes[name], layout.sizes[name]
            if type(bound) is int and size != bound:
                axis = next((i for i, g in enumerate(plan.input_groups) if name in g), None)
                where, detail = (
                    ("the input", f" (shape {shape_text(shape)}, axis {axis})")
                    if axis is not None
                    else ("axes_lengths", "")
                )
                raise _bound_error(call, op, pattern, name, bound, size, where, detail)
    if operation == "mean" and not tensor.is_floating_point():
        raise NotImplementedError("reduce_mean is not available for non-floating tensors")
    if counting_frame.get() is None:
        return plan.run(tensor, layout, reduction)
    with group(op, pattern):
        return plan.run(tensor, layout, reduction)


def reduce(tensor: T | list[T], pattern: str, reduction: Reduction, **axes_lengths: int) -> T:
    """einops.reduce: rearrange and reduce the axes missing on the right.

    Args:
        tensor: a tensor whose shape matches the left side of ``pattern`` (or a list of
            same-shape tensors, stacked along a new first axis).
        pattern: e.g. ``"batch (h h2) (w w2) -> batch h w"``.
        reduction: "min", "max", "sum", "mean", "prod", "any", "all" or a callable
            ``f(tensor, axes) -> tensor``.
        **axes_lengths: sizes of axes that the shapes alone do not determine.

    Returns:
        A tensor with the right side's axes.

    Costs one op per input element (``mean`` adds a divide per output element).

    >>> x = torch.arange(24.0).reshape(2, 3, 4)
    >>> reduce(x, "b h w -> b", "max")
    tensor([11., 23.])
    >>> reduce(x, "b h (w w2) -> b h w", "mean", w2=2).shape
    torch.Size([2, 3, 2])
    """
    return cast(T, _transform("reduce", tensor, pattern, reduction, axes_lengths))


def rearrange(tensor: T | list[T], pattern: str, **axes_lengths: int) -> T:
    """einops.rearrange: transpose, reshape, split and merge axes; a view where possible.

    Args:
        tensor: a tensor whose shape matches the left side of ``pattern`` (or a list of
            same-shape tensors, stacked along a new first axis).
        pattern: e.g. ``"batch seq (heads d) -> batch heads seq d"``.
        **axes_lengths: sizes of axes that the shapes alone do not determine.

    Returns:
        A tensor with the right side's axes: a view of ``tensor`` when torch can give one
        (recorded with 0 bytes), else a copy (recorded as read + write).

    >>> x = torch.zeros(2, 5, 12)
    >>> rearrange(x, "b s (h d) -> b h s d", h=4).shape
    torch.Size([2, 4, 5, 3])
    >>> rearrange(x, "b s c -> (b s) c").shape
    torch.Size([10, 12])
    """
    return cast(T, _transform("rearrange", tensor, pattern, "rearrange", axes_lengths))


def repeat(tensor: T | list[T], pattern: str, **axes_lengths: int) -> T:
    """einops.repeat: add new axes (sizes in ``axes_lengths``) and repeat along them.

    Args:
        tensor: a tensor whose shape matches the left side of ``pattern``.
        pattern: e.g. ``"h w -> h w c"``, ``"h w -> (h h2) w"``.
        **axes_lengths: the sizes of the new axes.

    Returns:
        A tensor with the right side's axes (a broadcast view where einops returns one).

    >>> repeat(torch.ones(2, 3), "h w -> h w c", c=4).shape
    torch.Size([2, 3, 4])
    >>> repeat(torch.tensor([1, 2]), "w -> (r w)", r=2)
    tensor([1, 2, 1, 2])
    """
    return cast(T, _transform("repeat", tensor, pattern, "repeat", axes_lengths))
