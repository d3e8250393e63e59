"""Checkers for hints that hold no tensor annotation (``int``, ``str | None``, ``Literal``...).

They follow beartype's semantics. Classes, ``None``, unions of them and ``Literal`` become a
plain predicate (an ``isinstance`` or a comparison): cheap per call, and simple enough for
torch.compile to trace. Other hints are asked of beartype; under torch.compile, which
cannot trace beartype, they are left unchecked (a valid call must never fail there).

beartype compiles its check of a hint when the contract is compiled, not at the first call:
a hint beartype cannot check (``list[int, str]``) is a :class:`~typedflops.errors.SpecError`
naming the hint, and beartype's deprecation warnings about valid hints (``typing.Dict``,
deprecated by PEP 585) are not passed on: they are about style, not about the call.
"""

from __future__ import annotations

import types
import typing
import warnings
from collections.abc import Callable
from typing import Any

from beartype import BeartypeConf
from beartype.door import die_if_unbearable, is_bearable
from beartype.roar import (
    BeartypeDecorHintPepDeprecationWarning,
    BeartypeDoorHintViolation,
    BeartypeException,
)

from ..errors import ContractError, SpecError
from .annotation import array_type_name, is_tensor_annotation
from .scope import CallState, is_compiling, violation
from .unchecked import compiling_leniently

__all__ = ["Checker", "hint_text", "plain_checker", "plain_predicate", "type_name", "type_name_of"]

# A checker inspects one value at a place ("argument 'x'", "argument 'xs[2]'", "the return
# value") and binds dims in the state, raising a ContractError subclass on a violation.
Checker = Callable[[Any, CallState, str], None]
Predicate = Callable[[Any], bool]


# Functions the import hook checks follow PEP 484's numeric tower (an int where a float is
# expected, as type checkers accept it); beartype's default, for `@typed_flops` by hand,
# does not.
_TOWER = BeartypeConf(is_pep484_tower=True)
_NO_TOWER = BeartypeConf()


def type_name(value: Any) -> str:
    """``a str``, ``an int``: the value's type, with its article."""
    return type_name_of(type(value))


def type_name_of(cls: type) -> str:
    """``a list``, ``an Iterator``: a class's name, with its article."""
    name = cls.__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def hint_text(hint: Any) -> str:
    """How messages show a hint: ``int``, ``Float[Tensor, "n"]``, ``list[int] | None``.

    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> hint_text(list[Float[Tensor, "n"]] | None)
    'list[Float[Tensor, "n"]] | None'
    """
    if is_tensor_annotation(hint):
        dtype = getattr(hint.dtype, "__name__", "Shaped")
        return f'{dtype}[{array_type_name(hint)}, "{hint.dim_str}"]'
    if hint is None or hint is type(None):
        return "None"
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(hint_text(arg) for arg in args)
    if isinstance(hint, type) and origin is None:
        return hint.__name__
    if origin is not None and args and origin is not typing.Literal:
        name = getattr(origin, "__name__", None) or repr(origin).replace("typing.", "")
        shown = ", ".join("..." if arg is Ellipsis else hint_text(arg) for arg in args)
        return f"{name}[{shown}]"
    return repr(hint).replace("typing.", "")


def _is_plain_class(hint: Any) -> bool:
    return (
        isinstance(hint, type)
        and typing.get_origin(hint) is None
        and not getattr(hint, "_is_protocol", False)
    )


def _literal_predicate(values: tuple[Any, ...]) -> Predicate:
    # beartype's rule: same type (bool counts as an int) and equal.
    def matches(value: Any) -> bool:
        return any(isinstance(value, type(allowed)) and value == allowed for allowed in values)

    return matches


def simple_predicate(hint: Any) -> Predicate | None:
    """A predicate equal to beartype's verdict on ``hint``, when one is simple; else None.

    >>> simple_predicate(int | None)(None), simple_predicate(typing.Literal["a"])("b")
    (True, False)
    >>> simple_predicate(list[int]) is None
    True
    """
    if hint is Any or hint is object:
        return lambda value: True
    if hint is None or hint is type(None):
        return lambda value: value is None
    if (hint is float or hint is complex) and compiling_leniently():
        tower = (int, float) if hint is float else (int, float, complex)
        return lambda value: isinstance(value, tower)
    if _is_plain_class(hint):
        return lambda value: isinstance(value, hint)
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return _literal_predicate(typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        options = [simple_predicate(option) for option in typing.get_args(hint)]
        if any(option is None for option in options):
            return None
        checks = typing.cast(list[Predicate], options)
        return lambda value: any(check(value) for check in checks)
    return None


def plain_predicate(hint: Any) -> Predicate:
    """Whether a value satisfies ``hint`` (beartype's verdict; True under torch.compile
    when the hint is not simple)."""
    predicate = simple_predicate(hint)
    if predicate is not None:
        return predicate
    conf = _TOWER if compiling_leniently() else _NO_TOWER
    _compile_beartype_check(hint, conf)
    return lambda value: is_compiling() or is_bearable(value, hint, conf=conf)


def _compile_beartype_check(hint: Any, conf: BeartypeConf) -> None:
    """Have beartype compile (and cache) its check of ``hint`` now, without its deprecation
    warnings; a hint it cannot check is a SpecError.

    >>> _compile_beartype_check(typing.Dict[str, int], _NO_TOWER)  # no warning
    >>> _compile_beartype_check(list[int, str], _NO_TOWER)
    Traceback (most recent call last):
    typedflops.errors.SpecError: hint list[int, str]: beartype cannot check it (...)
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BeartypeDecorHintPepDeprecationWarning)
        try:
            is_bearable(None, hint, conf=conf)
        except BeartypeException as exc:
            reason = " ".join(f"{exc}".split()).removeprefix("Is_bearable() ")
            raise SpecError.at(
                f"hint {hint_text(hint)}", f"beartype cannot check it ({reason})"
            ) from None


def _beartype_reason(text: str) -> str:
    r"""beartype's reason without its preamble, on one line: ``Die_if_unbearable() value
    'a' violates type hint <class 'int'>, as str 'a' not instance of int.`` -> ``str 'a'
    not instance of int`` (a value whose repr spans lines, such as a tensor's, is joined).

    >>> shown = '"tensor([[1.],\n        [1.]])"'
    >>> _beartype_reason(f"Die_if_unbearable() value {shown} violates type hint "
    ...                  f"<class 'float'>, as Tensor {shown} not instance of float.")
    'Tensor "tensor([[1.], [1.]])" not instance of float'
    """
    first = " ".join(text.split())
    _, found, tail = first.partition(" violates type hint ")
    if found:
        _, found, reason = tail.partition(", as ")
        if found:
            return reason.rstrip(".")
    return first.removeprefix("Die_if_unbearable() ")


def plain_checker(hint: Any) -> Checker:
    """The checker of a hint without tensor annotations (beartype's semantics)."""
    shown = hint_text(hint)
    predicate = simple_predicate(hint)
    conf = _TOWER if compiling_leniently() else _NO_TOWER
    if predicate is None:
        _compile_beartype_check(hint, conf)

    def check(value: Any, state: CallState, where: str) -> None:
        if predicate is not None:
            if predicate(value):
                return
        elif is_compiling() or is_bearable(value, hint, conf=conf):
            return
        if is_compiling():  # beartype's reason cannot be traced
            reason = f"got {type_name(value)}"
        else:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", BeartypeDecorHintPepDeprecationWarning)
                    die_if_unbearable(value, hint, conf=conf)
            except BeartypeDoorHintViolation as exc:
                reason = _beartype_reason(f"{exc}")
            else:  # pragma: no cover - beartype disagreed with itself
                return
        raise violation(
            ContractError,
            state,
            where,
            f"violates its hint {shown}: {reason}",
            expected=shown,
            actual=type(value).__name__,
        )

    return check
