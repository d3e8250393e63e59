"""A ``@typed_flops`` function bound to an object: what ``obj.method`` returns."""

from __future__ import annotations

import functools
import typing
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import sympy

    from ..cost.types import Cost


class _Bindable(Protocol):
    """What a bound method needs of its :class:`~typedflops.TypedFunction`."""

    name: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def estimate(self, *args: Any, **kwargs: Any) -> Cost: ...

    def formula_of(self, obj: Any) -> sympy.Expr: ...


__all__ = ["TypedMethod"]


class TypedMethod(functools.partial[Any]):
    """A ``@typed_flops`` function bound to an object, as ``obj.method`` returns it.

    Called like a bound method (in C, as a partial). ``__func__`` is the
    :class:`TypedFunction`, ``__self__`` the object; ``estimate(**dims)`` estimates the
    call on that object, and other attributes are the function's.
    """

    __slots__ = ()

    @property
    def __func__(self) -> _Bindable:
        return typing.cast(_Bindable, self.func)

    @property
    def __self__(self) -> Any:
        return self.args[0]

    def estimate(self, *args: Any, **kwargs: Any) -> Cost:
        """:meth:`TypedFunction.estimate` with this object first."""
        cost: Cost = self.__func__.estimate(self.args[0], *args, **kwargs)
        return cost

    @property
    def formula(self) -> sympy.Expr:
        """Forward FLOPs of calls on this object, in the dims of the method's annotations
        (those the object holds, a typed submodule's ``d_in``, fixed at its sizes)."""
        return self.__func__.formula_of(self.args[0])

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
