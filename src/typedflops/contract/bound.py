"""A ``@typed_flops`` function bound to an object: what ``obj.method`` returns."""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["TypedMethod"]


class TypedMethod(functools.partial[Any]):
    """A ``@typed_flops`` function bound to an object, as ``obj.method`` returns it.

    Called like a bound method (in C, as a partial). ``__func__`` is the checked function,
    ``__self__`` the object; other attributes are the function's.
    """

    __slots__ = ()

    @property
    def __func__(self) -> Any:
        return self.func

    @property
    def __self__(self) -> Any:
        return self.args[0]

    def __getattr__(self, name: str) -> Any:
        if name == "__wrapped__":  # inspect.signature would skip the binding of the object
            raise AttributeError(name)
        return getattr(self.func, name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TypedMethod):
            return NotImplemented
        return self.func is other.func and self.args[0] is other.args[0]

    def __hash__(self) -> int:
        return hash((self.func, id(self.args[0])))

    def __reduce__(self) -> tuple[Any, ...]:
        # By reference, as Python pickles bound methods: the object, then the name.
        return getattr, (self.args[0], self.func.__name__)

    def __repr__(self) -> str:
        return f"<bound typed_flops {self.__func__.name} of {self.args[0]!r}>"
