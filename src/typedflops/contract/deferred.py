"""Deferred dims: ``{name}`` in a dim string stands for the value of the call's argument.

jaxtyping reads ``Float[Tensor, " {dim}"]`` (or ``" {dim-1}"``, ``" {self.size}"``,
``"n+{k}"``) as an f-string over the call's arguments, defaults included, evaluated when the
call is checked. typedflops gives each ``{...}`` a placeholder dim, parses the rest as any
symbolic axis, and computes the placeholders' sizes from the arguments when the call's
symbolic axes are resolved. What is inside the braces is parsed, never evaluated: names,
attributes (``self.size``), integers and ``+ - * // %``.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import SpecError
from .annotation import TensorSpec, tensor_spec

__all__ = ["PLACEHOLDER_PREFIX", "argument_sizes", "shown", "spec_of"]

#: Placeholder dims are named ``typedflops_arg0``, ``typedflops_arg1``, ... (not ``_``-led:
#: jaxtyping reads those as anonymous).
PLACEHOLDER_PREFIX = "typedflops_arg"

_BRACES = re.compile(r"\{([^{}]*)\}")
_OPERATORS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}

# One placeholder per distinct text in braces, shared by every annotation.
_placeholders: dict[str, str] = {}
# placeholder -> (the text in braces, its evaluator over the arguments)
_evaluators: dict[str, tuple[str, Callable[[Mapping[str, Any]], Any]]] = {}


def _compile(node: ast.expr, text: str) -> Callable[[Mapping[str, Any]], Any]:
    if isinstance(node, ast.Name):
        name = node.id
        return lambda arguments: arguments[name]
    if isinstance(node, ast.Attribute) and not node.attr.startswith("__"):
        owner, attribute = _compile(node.value, text), node.attr
        return lambda arguments: getattr(owner(arguments), attribute)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
        return lambda arguments: value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _compile(node.operand, text)
        return lambda arguments: -inner(arguments)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _compile(node.left, text), _compile(node.right, text)
        apply = _OPERATORS[type(node.op)]
        return lambda arguments: apply(left(arguments), right(arguments))
    raise SpecError.at(
        f"deferred dim {{{text}}}",
        f"{ast.unparse(node)!r} is not allowed; only argument names, their attributes, "
        "integers and + - * // % are",
    )


def _placeholder(text: str) -> str:
    text = text.strip()
    found = _placeholders.get(text)
    if found is None:
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError:
            raise SpecError.at(f"deferred dim {{{text}}}", "not a valid expression") from None
        found = f"{PLACEHOLDER_PREFIX}{len(_placeholders)}"
        _evaluators[found] = (text, _compile(tree.body, text))
        _placeholders[text] = found
    return found


_PLACEHOLDER_USE = re.compile(rf"\(({PLACEHOLDER_PREFIX}\d+)\)")


def shown(text: str) -> str:
    """An expression as its annotation wrote it: placeholders back in braces.

    >>> shown(f"({_placeholder('dim - 1')})*2")
    '{dim - 1}*2'
    """
    return _PLACEHOLDER_USE.sub(lambda match: "{" + _evaluators[match.group(1)][0] + "}", text)


def names_in_braces(dim_str: str) -> set[str]:
    """The argument names that the ``{...}`` of a dim string use.

    >>> sorted(names_in_braces("n {self.size}-{k}"))
    ['k', 'self']
    """
    names: set[str] = set()
    for text in _BRACES.findall(dim_str):
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError:
            continue
        names.update(node.id for node in ast.walk(tree) if isinstance(node, ast.Name))
    return names


@functools.cache
def spec_of(hint: Any) -> TensorSpec:
    """The :class:`TensorSpec` of a jaxtyping annotation, deferred dims included.

    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> spec = spec_of(Float[Tensor, "n {k}"])
    >>> spec.dim_str, spec.axes[1].kind.name, shown(spec.axes[1].expression.text)
    ('n {k}', 'SYMBOLIC', '{k}')
    """
    dim_str: str = hint.dim_str
    if "{" not in dim_str:
        return tensor_spec(hint)
    rewritten = _BRACES.sub(lambda match: f"({_placeholder(match.group(1))})", dim_str)
    spec = tensor_spec(hint.dtype[hint.array_type, rewritten])
    return dataclasses.replace(spec, hint=hint, dim_str=dim_str)


def argument_sizes(
    names: Iterable[str], arguments: Mapping[str, Any], where: str
) -> dict[str, int]:
    """The sizes of the placeholder dims among ``names``, from the call's arguments."""
    sizes: dict[str, int] = {}
    for name in names:
        if not name.startswith(PLACEHOLDER_PREFIX) or name not in _evaluators:
            continue
        text, evaluate = _evaluators[name]
        try:
            value = evaluate(arguments)
        except KeyError as exc:
            raise SpecError.at(
                where, f"deferred dim {{{text}}} uses {exc.args[0]}, which is not a parameter"
            ) from None
        except AttributeError as exc:
            raise SpecError.at(f"{where}: deferred dim {{{text}}}", str(exc)) from None
        try:
            if isinstance(value, bool):
                raise TypeError
            sizes[name] = operator.index(value)
        except TypeError:
            raise SpecError.at(
                where,
                f"deferred dim {{{text}}} is {type(value).__name__} {value!r}, not an integer",
            ) from None
    return sizes
