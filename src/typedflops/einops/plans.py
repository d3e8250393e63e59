"""einops patterns, parsed once: the plan that checks a call, costs it and runs it.

A pattern is checked by the grammar core (:mod:`typedflops.syntax.patterns`, einops' own
rules) and turned into a plan, cached per pattern (and operand count or input rank). A
plan's layout at given shapes (the size of every axis, the pairwise contraction order of a
3+ operand einsum) is cached per shapes, so a repeated call costs two dict look-ups before
the kernel runs.

Inner functions raise :class:`~typedflops.syntax.Problem` (a short reason);
:func:`pattern_error` adds the context (function, op, pattern, input shapes, offending
axis) once, at the public boundary.
"""

from __future__ import annotations

import functools
import math
import string
from collections.abc import Sequence
from dataclasses import dataclass

import opt_einsum
import torch

from ..errors import PatternError
from ..syntax import Problem
from ..syntax.patterns import (
    ELLIPSIS,
    Group,
    Side,
    check_operand_count,
    check_rank,
    check_reduction,
    einsum_pattern,
    transform_pattern,
)
from ..text import shape_text

__all__ = [
    "HIDDEN_PREFIX",
    "EinsumLayout",
    "EinsumPlan",
    "EinsumStep",
    "Problem",
    "TransformLayout",
    "TransformPlan",
    "einsum_layout",
    "einsum_plan",
    "pattern_error",
    "transform_layout",
    "transform_plan",
]

# Axes hidden behind "..." are named "...0", "...1", ...: never valid axis names, so they
# never collide with a user's axis (not even einops' one-axis "…").
HIDDEN_PREFIX = "..."


def pattern_error(
    op: str,
    pattern: str,
    shapes: Sequence[Sequence[int]],
    reason: str,
    axis: str | None = None,
    function: str | None = None,
) -> PatternError:
    """One PatternError: the reason first, then the pattern's inputs and the offending axis."""
    where = f'{function}(): {op} "{pattern}"' if function else f'{op} "{pattern}"'
    context = ["input shapes: " + ", ".join(shape_text(s) for s in shapes)]
    if axis is not None:
        context.append(f"offending axis: {axis}")
    return PatternError.at(where, reason, context=context)


# -- einsum -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EinsumStep:
    """One pairwise (or single-operand) contraction of a 3+ operand einsum.

    ``operands`` index the current operand list; ``equation`` is a torch.einsum equation.
    """

    operands: tuple[int, ...]
    equation: str


@dataclass(frozen=True, eq=False)
class EinsumLayout:
    """An einsum plan at given operand shapes (identity-hashed, cached per shapes).

    ``axis_sizes`` maps every axis (named, or ``…k`` for the k-th broadcast ellipsis axis,
    counted from the left of the broadcast ellipsis shape) to its size, broadcast over
    operands; ``operand_axes`` names each operand's axes; ``occurrences`` lists, per named
    axis, (operand index, axis index, size); ``conflict`` is the reason a named axis has two
    sizes (checked after the bound dims, so a ShapeError naming the bound dim comes first);
    ``steps`` the contraction order of a 3+ operand einsum.
    """

    axis_sizes: dict[str, int]
    operand_axes: tuple[tuple[str, ...], ...]
    output_axes: tuple[str, ...]
    occurrences: dict[str, tuple[tuple[int, int, int], ...]]
    conflict: tuple[str, str] | None
    steps: tuple[EinsumStep, ...]
    step_axes: tuple[tuple[tuple[tuple[str, ...], ...], tuple[str, ...]], ...]


@dataclass(frozen=True, eq=False)
class EinsumPlan:
    """A parsed einsum pattern: per operand its axis names (``...`` kept as a marker).

    ``equation`` is the compact torch.einsum equation einops itself builds (one letter per
    axis, in order of first appearance), so 1-2 operand calls run exactly as einops runs them.
    """

    pattern: str
    operands: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]
    equation: str
    letters: dict[str, str]
    has_ellipsis: bool


@functools.lru_cache(maxsize=1024)
def einsum_plan(pattern: str, count: int) -> EinsumPlan:
    """Parse an einops einsum pattern for ``count`` operands (cached; raises ``Problem``)."""
    parsed = einsum_pattern(pattern)
    check_operand_count(parsed, count)
    letters: dict[str, str] = {}
    for axis in (a for axes in parsed.operands for a in axes if a != ELLIPSIS):
        letters.setdefault(axis, string.ascii_letters[len(letters)])
    return EinsumPlan(
        pattern=pattern,
        operands=parsed.operands,
        output=parsed.output,
        equation=parsed.equation,
        letters=letters,
        has_ellipsis=parsed.has_ellipsis,
    )


@functools.lru_cache(maxsize=4096)
def einsum_layout(plan: EinsumPlan, shapes: tuple[tuple[int, ...], ...]) -> EinsumLayout:
    """A plan's sizes and contraction order at ``shapes`` (cached; raises ``Problem``)."""
    ellipsis_ranks: list[int] = []
    for index, (axes, shape) in enumerate(zip(plan.operands, shapes, strict=True)):
        named = len(axes) - (ELLIPSIS in axes)
        if ELLIPSIS in axes:
            if len(shape) < named:
                raise Problem(
                    f"operand {index + 1} has shape {shape_text(shape)} but its axes "
                    f'"{_spelled(axes)}" need at least {named} dimensions'
                )
            ellipsis_ranks.append(len(shape) - named)
        elif len(shape) != named:
            raise Problem(
                f"operand {index + 1} has shape {shape_text(shape)} but its axes "
                f'"{_spelled(axes)}" need {named} dimension{"s" * (named != 1)}'
            )
        else:
            ellipsis_ranks.append(0)
    ellipsis_rank = max(ellipsis_ranks, default=0)
    sizes: dict[str, int] = {}
    occurrences: dict[str, list[tuple[int, int, int]]] = {}
    conflict: tuple[str, str] | None = None
    operand_axes: list[tuple[str, ...]] = []
    for index, (axes, shape) in enumerate(zip(plan.operands, shapes, strict=True)):
        expanded = _expand(axes, ellipsis_ranks[index], ellipsis_rank)
        operand_axes.append(expanded)
        for position, (axis, size) in enumerate(zip(expanded, shape, strict=True)):
            if not axis.startswith(HIDDEN_PREFIX):
                occurrences.setdefault(axis, []).append((index, position, size))
            known = sizes.get(axis)
            # Size 1 broadcasts, as in torch.einsum; two sizes other than 1 are a mistake.
            if known is None or known == 1:
                sizes[axis] = size
            elif size not in (1, known) and conflict is None:
                first = occurrences[axis][0] if axis in occurrences else (0, 0, known)
                conflict = (
                    f"axis '{axis}' has size {first[2]} in operand {first[0] + 1} "
                    f"(axis {first[1]}) but {size} in operand {index + 1} (axis {position})",
                    axis,
                )
    output = _expand(plan.output, ellipsis_rank, ellipsis_rank)
    layout_steps: tuple[EinsumStep, ...] = ()
    step_axes: tuple[tuple[tuple[tuple[str, ...], ...], tuple[str, ...]], ...] = ()
    if len(shapes) > 2 and conflict is None:
        layout_steps, step_axes = _contraction_order(tuple(operand_axes), output, sizes)
    return EinsumLayout(
        axis_sizes=sizes,
        operand_axes=tuple(operand_axes),
        output_axes=output,
        occurrences={name: tuple(found) for name, found in occurrences.items()},
        conflict=conflict,
        steps=layout_steps,
        step_axes=step_axes,
    )


def _spelled(axes: tuple[str, ...]) -> str:
    return " ".join("..." if axis == ELLIPSIS else axis for axis in axes)


def _expand(axes: tuple[str, ...], rank: int, full_rank: int) -> tuple[str, ...]:
    """Replace "..." by ``rank`` axes ``…k``, right-aligned in a broadcast of ``full_rank``."""
    if ELLIPSIS not in axes:
        return axes
    cut = axes.index(ELLIPSIS)
    hidden = tuple(f"{HIDDEN_PREFIX}{k}" for k in range(full_rank - rank, full_rank))
    return (*axes[:cut], *hidden, *axes[cut + 1 :])


def _contraction_order(
    operands: tuple[tuple[str, ...], ...], output: tuple[str, ...], sizes: dict[str, int]
) -> tuple[tuple[EinsumStep, ...], tuple[tuple[tuple[tuple[str, ...], ...], tuple[str, ...]], ...]]:
    """The FLOP-minimal pairwise order ("optimal" for <= 4 operands, "greedy" beyond).

    Each axis gets a letter of its own (ellipsis axes included), so every step is an
    explicit torch.einsum equation and every step's axes are known by name.
    """
    names = list(dict.fromkeys([axis for axes in operands for axis in axes] + list(output)))
    if len(names) > len(string.ascii_letters):
        raise Problem("too many axes in einsum (at most 52)")
    letter = {name: string.ascii_letters[i] for i, name in enumerate(names)}
    name_of = {v: k for k, v in letter.items()}
    equation = ",".join("".join(letter[a] for a in axes) for axes in operands)
    equation += "->" + "".join(letter[a] for a in output)
    shapes = [tuple(sizes[a] for a in axes) for axes in operands]
    strategy = "optimal" if len(operands) <= 4 else "greedy"
    _, info = opt_einsum.contract_path(equation, *shapes, shapes=True, optimize=strategy)
    steps: list[EinsumStep] = []
    axes_of_steps = []
    for contraction in info.contraction_list:
        positions, step_equation = tuple(contraction[0]), contraction[2]
        inputs_text, output_text = step_equation.split("->")
        # opt_einsum names its operands in its own order; keep our names via the letters.
        inputs = tuple(tuple(name_of[c] for c in text) for text in inputs_text.split(","))
        steps.append(EinsumStep(operands=positions, equation=step_equation))
        axes_of_steps.append((inputs, tuple(name_of[c] for c in output_text)))
    return tuple(steps), tuple(axes_of_steps)


# -- rearrange, reduce, repeat ------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class TransformLayout:
    """A transform plan at one input shape: the size of every elementary axis."""

    sizes: dict[str, int]
    output_shape: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class TransformPlan:
    """A parsed rearrange/reduce/repeat pattern for one input rank (and axes_lengths names).

    ``input_groups`` are each input axis's elementary axes (an ``(h d)`` axis is ``(h, d)``;
    numbered axes are named ``"3#0"`` and have a known size), ``output_groups`` the same on
    the right. Execution follows einops' recipe step for step (reshape, permute, reduce,
    add axes, reshape), so results are bit for bit einops' results.
    """

    pattern: str
    operation: str
    input_groups: tuple[tuple[str, ...], ...]
    output_groups: tuple[tuple[str, ...], ...]
    numbered: dict[str, int]
    reduced: tuple[str, ...]
    permutation: tuple[int, ...] | None
    added: tuple[tuple[int, str], ...]
    init_reshape: bool
    final_reshape: bool
    named: frozenset[str]
    elementary_count: int

    def run(self, tensor: torch.Tensor, layout: TransformLayout, reduction: object) -> torch.Tensor:
        """Execute as einops does (the same torch calls, in the same order)."""
        sizes = layout.sizes
        if self.init_reshape:
            tensor = tensor.reshape([sizes[a] for group in self.input_groups for a in group])
        if self.permutation is not None:
            tensor = tensor.permute(self.permutation)
        if self.reduced:
            count = self.elementary_count
            tensor = _reduce(tensor, reduction, tuple(range(count - len(self.reduced), count)))
        if self.added:
            count = len(self.added) + tensor.dim()
            repeats = [-1] * count
            for position, axis in self.added:
                tensor = torch.unsqueeze(tensor, position)
                repeats[position] = sizes[axis]
            tensor = tensor.expand(repeats)
        if self.final_reshape:
            tensor = tensor.reshape(layout.output_shape)
        return tensor


def _reduce(tensor: torch.Tensor, reduction: object, axes: tuple[int, ...]) -> torch.Tensor:
    # The same calls as einops' torch backend, so results match bit for bit.
    if callable(reduction):
        result = reduction(tensor, axes)
        assert isinstance(result, torch.Tensor)
        return result
    if reduction == "min":
        return tensor.amin(dim=axes)
    if reduction == "max":
        return tensor.amax(dim=axes)
    if reduction == "sum":
        return tensor.sum(dim=axes)
    if reduction == "mean":
        return tensor.mean(dim=axes)
    for axis in sorted(axes)[::-1]:  # prod, any, all: torch reduces one axis at a time
        tensor = getattr(tensor, str(reduction))(dim=axis)
    return tensor


@functools.lru_cache(maxsize=1024)
def transform_plan(
    pattern: str, operation: str, axes_names: tuple[str, ...], ndim: int
) -> TransformPlan:
    """Parse a rearrange/reduce/repeat pattern (cached; raises ``Problem``).

    ``operation`` is "rearrange", "repeat", a reduction name, or "callable".
    """
    if operation not in ("rearrange", "repeat", "callable"):
        check_reduction(operation)
    op = operation if operation in ("rearrange", "repeat") else "reduce"
    parsed = transform_pattern(pattern, op, axes_names)
    check_rank(parsed, ndim)
    left, right = parsed.left, parsed.right
    numbered: dict[str, int] = {}

    def groups(side: Side, hidden: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
        found: list[tuple[str, ...]] = []
        for entry in side.entries:
            if not isinstance(entry, Group):  # "..." outside parentheses
                found.extend((axis,) for axis in hidden)
                continue
            names: list[str] = []
            for axis in entry.members:
                if axis == ELLIPSIS:
                    names.extend(hidden)
                elif isinstance(axis, int):
                    name = f"{axis}#{len(numbered)}"
                    numbered[name] = axis
                    names.append(name)
                else:
                    names.append(axis)
            found.append(tuple(names))
        return tuple(found)

    hidden: tuple[str, ...] = ()
    if left.has_ellipsis:
        hidden = tuple(f"{HIDDEN_PREFIX}{k}" for k in range(ndim - len(left.entries) + 1))
    input_groups = groups(left, hidden)
    output_groups = groups(right, hidden)
    left_flat = [a for group in input_groups for a in group]
    right_flat = [a for group in output_groups for a in group]
    left_set, right_set = set(left_flat), set(right_flat)
    reduced = tuple(a for a in left_flat if a not in right_set)
    order = [a for a in right_flat if a in left_set] + list(reduced)
    permutation = tuple(left_flat.index(a) for a in order)
    added = tuple((i, a) for i, a in enumerate(right_flat) if a not in left_set)
    return TransformPlan(
        pattern=pattern,
        operation=operation,
        input_groups=input_groups,
        output_groups=output_groups,
        numbered=numbered,
        reduced=reduced,
        permutation=None if permutation == tuple(range(len(permutation))) else permutation,
        added=added,
        init_reshape=any(len(group) != 1 for group in input_groups),
        final_reshape=any(len(group) != 1 for group in output_groups),
        named=frozenset(left.names | right.names),
        elementary_count=len(left_flat),
    )


@functools.lru_cache(maxsize=4096)
def transform_layout(
    plan: TransformPlan, shape: tuple[int, ...], lengths: tuple[tuple[str, int], ...]
) -> TransformLayout:
    """Elementary axis sizes of a plan at an input ``shape`` (cached; raises ``Problem``)."""
    sizes: dict[str, int] = dict(plan.numbered)
    sizes.update(lengths)
    for index, (group, length) in enumerate(zip(plan.input_groups, shape, strict=True)):
        unknown = [a for a in group if a not in sizes]
        known = math.prod(sizes[a] for a in group if a in sizes)
        if not unknown:
            if length != known:
                spelled = "(" + " ".join(_display(a) for a in group) + ")"
                raise Problem(
                    f"input axis {index} has size {length} but {spelled} is {known}", axis=spelled
                )
        elif known == 0 or length % known:
            spelled = "(" + " ".join(_display(a) for a in group) + ")"
            raise Problem(
                f"input axis {index} of size {length} cannot be split into {spelled}:"
                f" {length} is not divisible by {known}",
                axis=unknown[0],
            )
        else:
            sizes[unknown[0]] = length // known
    output_shape = tuple(math.prod(sizes[a] for a in group) for group in plan.output_groups)
    return TransformLayout(sizes=sizes, output_shape=output_shape)


def _display(axis: str) -> str:
    return axis.split("#", 1)[0] if "#" in axis else axis
