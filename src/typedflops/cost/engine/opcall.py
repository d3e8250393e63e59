"""One op call as a FLOP rule sees it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .tensors import TensorMeta, flat_tensors

__all__ = ["OpCall", "Rule"]


@dataclass(frozen=True)
class OpCall:
    """One op call as a rule sees it: the arguments with tensors as :class:`TensorMeta`.

    ``out`` is the output (a :class:`TensorMeta`, or a tuple for several); sizes are ints for
    an op that ran, sympy expressions when a formula is being built.
    """

    name: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    out: Any

    @property
    def inputs(self) -> list[TensorMeta]:
        """The tensor arguments, in order (nested lists included)."""
        return flat_tensors((self.args, tuple(self.kwargs.values())))

    @property
    def output(self) -> TensorMeta:
        """The first output tensor."""
        found = flat_tensors(self.out)
        if not found:
            raise ValueError(f"{self.name}: no tensor output")
        return found[0]

    def arg(self, index: int, name: str, default: Any = None) -> Any:
        """A positional-or-keyword argument of the op's schema."""
        if index < len(self.args):
            return self.args[index]
        return self.kwargs.get(name, default)


Rule = Callable[[OpCall], Any]
