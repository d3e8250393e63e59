"""``@typed_flops`` on classes: a dataclass's fields are checked when it is made.

As jaxtyping does, decorating a dataclass checks its ``__init__``, whose parameters are
the fields: the class is returned (still a class, changed in place), and each instance is
checked before ``__init__`` runs, in one dim scope for all fields (``x: "n d"`` and
``y: "n"`` must agree on ``n``). Other classes are returned unchanged.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from .annotation import contains_tensor_annotation
from .function import CheckedFunction

__all__ = ["has_tensor_fields", "typed_class"]

T = TypeVar("T", bound=type)


def has_tensor_fields(cls: type) -> bool | None:
    """Whether a dataclass has a field annotated with a tensor annotation (None: its
    annotations cannot be resolved yet)."""
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except NameError:
        return None
    except Exception:  # an annotation that does not evaluate: not ours to judge
        return False
    names = {field.name for field in dataclasses.fields(cls)}
    return any(contains_tensor_annotation(hint) for name, hint in hints.items() if name in names)


def typed_class(cls: T) -> T:
    """Check a dataclass's fields at ``__init__`` (in place); return the class.

    >>> import torch
    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> @typed_class
    ... @dataclasses.dataclass
    ... class Batch:
    ...     x: Float[Tensor, "n d"]
    ...     y: Float[Tensor, " n"]
    >>> isinstance(Batch(torch.ones(2, 3), torch.ones(2)), Batch)
    True
    >>> Batch(torch.ones(2, 3), torch.ones(3))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
      ...
    typedflops.errors.ShapeError: Batch.__init__(): argument 'y' has shape (3,) but ...
    """
    if not dataclasses.is_dataclass(cls) or getattr(cls, "__no_type_check__", False):
        return cls
    init = cls.__init__
    if isinstance(init, CheckedFunction):
        return cls  # checked already (decorated twice, or an __init__ decorated by hand)
    setattr(cls, "__init__", DataclassInit(init, owner=cls))  # noqa: B010 (a method's place)
    return cls


class DataclassInit(CheckedFunction[..., None]):
    """A dataclass's checked ``__init__`` (see :func:`typedflops.contract.classes.typed_class`).

    Not checked once its class is marked ``@typing.no_type_check``.
    """

    def __init__(self, fn: Callable[..., None], *, owner: type) -> None:
        super().__init__(fn, flops=None, name=None)
        self._owner = owner

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if getattr(self._owner, "__no_type_check__", False):
            return self._fn(*args, **kwargs)
        return CheckedFunction.__call__(self, *args, **kwargs)
