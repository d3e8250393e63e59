"""``torch.einsum`` equations (``"bhid,bhjd->bhij"``): torch's grammar and rules.

One letter per axis (``a-z``, ``A-Z``), ``...`` at most once per operand, operands
separated by commas, an optional ``->`` and output; spaces are ignored, as torch ignores
them. Without ``->`` the output is every letter that appears once, in torch's order
(upper case before lower case), after the ellipsis's axes. Problems raise
:class:`~typedflops.syntax.Problem`, the reasons worded after torch's own.
"""

from __future__ import annotations

import functools
import string
from collections import Counter
from dataclasses import dataclass

from . import Problem
from .patterns import ELLIPSIS

__all__ = ["TorchEquation", "check_equation_operands", "torch_equation"]

_ORDER = string.ascii_uppercase + string.ascii_lowercase


@dataclass(frozen=True)
class TorchEquation:
    """A ``torch.einsum`` equation torch accepts: each operand's subscripts and the
    output's, with :data:`ELLIPSIS` for ``...``."""

    equation: str
    operands: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]


def _subscripts(term: str, offset: int, where: str) -> tuple[str, ...]:
    found: list[str] = []
    index = 0
    while index < len(term):
        char = term[index]
        if char == ".":
            if term[index : index + 3] != ELLIPSIS:
                raise Problem(f"'.' in {where} is not part of an ellipsis '...'")
            if ELLIPSIS in found:
                raise Problem(f"'...' appears twice in {where}", axis=ELLIPSIS)
            found.append(ELLIPSIS)
            index += 3
            continue
        if char not in _ORDER:
            raise Problem(
                f"invalid subscript {char!r} at index {offset + index}: subscripts must be"
                " letters a-z or A-Z",
                axis=char,
            )
        found.append(char)
        index += 1
    return tuple(found)


@functools.lru_cache(maxsize=4096)
def torch_equation(equation: str) -> TorchEquation:
    """Check an equation as ``torch.einsum`` does before it looks at the operands.

    >>> torch_equation("bi,ik->bk").operands
    (('b', 'i'), ('i', 'k'))
    >>> torch_equation("ij,jk").output
    ('i', 'k')
    >>> torch_equation("ij->ik")
    Traceback (most recent call last):
      ...
    typedflops.syntax.Problem: output subscript 'k' appears in no operand
    """
    text = equation.replace(" ", "")
    left, arrow, right = text.partition("->")
    operands: list[tuple[str, ...]] = []
    offset = 0
    for number, term in enumerate(left.split(",")):
        operands.append(_subscripts(term, offset, f"operand {number + 1}"))
        offset += len(term) + 1
    letters = Counter(axis for axes in operands for axis in axes if axis != ELLIPSIS)
    if not arrow:
        once = sorted((axis for axis, count in letters.items() if count == 1), key=_ORDER.index)
        ellipsis = (ELLIPSIS,) if any(ELLIPSIS in axes for axes in operands) else ()
        return TorchEquation(equation, tuple(operands), (*ellipsis, *once))
    output = _subscripts(right, len(left) + 2, "the output")
    seen: set[str] = set()
    for axis in output:
        if axis in seen:
            raise Problem(f"output subscript '{axis}' appears more than once", axis=axis)
        if axis != ELLIPSIS and axis not in letters:
            raise Problem(f"output subscript '{axis}' appears in no operand", axis=axis)
        seen.add(axis)
    return TorchEquation(equation, tuple(operands), output)


def check_equation_operands(equation: TorchEquation, count: int) -> None:
    """Raise :class:`Problem` unless the equation names ``count`` operands.

    >>> check_equation_operands(torch_equation("ij,jk->ik"), 1)
    Traceback (most recent call last):
      ...
    typedflops.syntax.Problem: the equation has 2 operands but 1 tensor was given
    """
    named = len(equation.operands)
    if named != count:
        raise Problem(
            f"the equation has {named} operand{'s' * (named != 1)} "
            f"but {count} tensor{'s were' if count != 1 else ' was'} given"
        )
