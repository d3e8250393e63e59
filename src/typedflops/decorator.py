"""``typed_flops``: the decorator users write, on a function, a method, a property, a
dataclass or an ``nn.Module`` subclass, and the :class:`TypedFunction` it returns.

A :class:`TypedFunction` is a checked function (:mod:`typedflops.contract`) with its cost
model (:mod:`typedflops.cost.model`: ``estimate``, ``formula``) and its timing
(:mod:`typedflops.timing`: ``benchmark``).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
import weakref
from collections.abc import Callable
from typing import Any, ClassVar, ParamSpec, TypeVar, overload

import sympy
import torch

from .contract.annotation import is_tensor_annotation
from .contract.bound import TypedMethod
from .contract.classes import typed_class
from .contract.function import CheckedFunction
from .cost.model import estimate, formula_at
from .cost.types import Cost
from .cost.untyped import estimate as estimate_model
from .cost.untyped import holds_annotations
from .errors import SpecError
from .syntax.symbolic import negative_for_every_size
from .timing.bench import Measurement, benchmark

__all__ = ["TypedFunction", "typed_flops"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T", bound=type)


class CostedMethod(TypedMethod):
    """A ``@typed_flops`` method bound to an object: ``obj.method.estimate(**dims)`` and
    ``obj.method.formula`` cost calls on that object."""

    __slots__ = ()

    def estimate(self, *args: Any, **kwargs: Any) -> Cost:
        """:meth:`TypedFunction.estimate` with this object first."""
        function: TypedFunction[..., Any] = self.__func__
        return function.estimate(self.args[0], *args, **kwargs)

    @property
    def formula(self) -> sympy.Expr:
        """Forward FLOPs of calls on this object, in the dims of the method's annotations
        (those the object holds, a typed submodule's ``d_in``, fixed at its sizes)."""
        function: TypedFunction[..., Any] = self.__func__
        return function.formula_of(self.args[0])


class TypedFunction(CheckedFunction[P, R]):
    """A function with a checked jaxtyping contract and a cost model (see :func:`typed_flops`).

    Calling it checks the call; ``formula``, ``estimate`` and ``benchmark`` give its cost.
    """

    method_class: ClassVar[type[TypedMethod]] = CostedMethod

    def __init__(self, fn: Callable[P, R], *, flops: str | None, name: str | None) -> None:
        super().__init__(fn, flops=flops, name=name)
        declared = self.declared
        if declared is not None and negative_for_every_size(declared):
            raise SpecError.at(
                f"{self.name}()",
                f"flops={flops!r} is negative for every size; a count of FLOPs never is",
            )
        # The sizes of the last estimate() (SPEC: the formula is taken there when given).
        self._last_estimate: dict[str, Any] | None = None
        self._formulas: dict[tuple[tuple[str, Any], ...], sympy.Expr] = {}

    def estimate(
        self,
        *args: Any,
        dtype: torch.dtype | None = None,
        grad: tuple[str, ...] | list[str] = (),
        **dims: Any,
    ) -> Cost:
        """The cost of one call at the given dim sizes, from dry runs on fake tensors.

        Tensors are built from the annotations (nothing is allocated): each named dim's
        size, ``*name`` dims and ``ellipsis=`` (for ``...``) as an int or a tuple of sizes.
        ``grad`` names the parameters whose tensors require grad (a module's parameters
        follow their ``requires_grad``); ``dtype`` overrides the floating dtype (one a
        floating annotation cannot take is a SpecError, not another dtype). Positional
        ``args`` fill the leading parameters (a module for ``self``); a keyword naming a
        non-tensor parameter is passed to it. An Optional tensor parameter whose default is
        None stays None unless a dim only it uses is given (``bias=True`` builds it,
        ``bias=None`` keeps it None). Missing, unknown or bad sizes
        raise :class:`SpecError`.

        The formulas are fitted from dry runs at other sizes and checked (see
        :attr:`Cost.exact`); ``flops=`` replaces the forward count.
        """
        if not args and any(holds_annotations(value) for value in dims.values()):
            # (a list or dict of annotations, ``xs=[Float[Tensor, "n d"]] * 3``: built in
            # place, and each tensor parameter not given built from its own annotation)
            own = {
                p.name: p.hint
                for p in self.contract.parameters
                if p.name not in dims and is_tensor_annotation(p.hint)
            }
            return estimate_model(self, dtype=dtype, grad=grad, **own, **dims)
        cost = estimate(self, args, dims, dtype, tuple(grad))
        if not args:  # a method's estimate depends on its object: not kept
            self._last_estimate = dict(dims)
        return cost

    @property
    def formula(self) -> sympy.Expr:
        """Forward FLOPs as a sympy expression in the annotation's dim names.

        From ``flops=`` when given; otherwise fitted from dry runs at the sizes of the
        last ``estimate`` (or at probe sizes of its own choosing when there was none). It
        is the same at any sizes unless the body branches on sizes.
        """
        declared = self.declared
        if declared is not None:
            return declared
        sizes = self._last_estimate
        key = () if sizes is None else tuple(sorted(sizes.items(), key=lambda item: item[0]))
        found = self._formulas.get(key)
        if found is None:
            found = self._formulas[key] = formula_at(self, (), sizes)
        return found

    def formula_of(self, obj: Any) -> sympy.Expr:
        """A method's forward FLOPs on ``obj`` (what ``obj.method.formula`` gives), fitted at
        probe sizes for the dims that ``obj`` does not hold."""
        declared = self.declared
        if declared is not None:
            return declared
        return formula_at(self, (obj,))

    def benchmark(self, *args: Any, **kwargs: Any) -> Measurement:
        """Time calls of this function: the same as ``typedflops.benchmark(self, ...)``."""
        return benchmark(self, *args, **kwargs)


@overload
def typed_flops(fn: type[T], /) -> type[T]: ...  # type: ignore[overload-overlap]
@overload
def typed_flops(fn: Callable[P, R], /) -> TypedFunction[P, R]: ...
@overload
def typed_flops(
    *, flops: str | None = None, name: str | None = None
) -> Callable[[Callable[P, R]], TypedFunction[P, R]]: ...
def typed_flops(fn: Any = None, /, *, flops: str | None = None, name: str | None = None) -> Any:
    """Check a function's jaxtyping contract on every call and give it a cost model.

    Bare (``@typed_flops``) or with options (``@typed_flops(flops="2*m*n*k", name="mm")``).
    Each call checks every parameter and the return value (shapes, dtypes, one device;
    other hints with beartype's semantics) before the body runs. ``f.formula``,
    ``f.estimate(**dims)`` and ``f.benchmark(*args)`` give its FLOPs, bytes and time.

    On a class: a dataclass's fields are checked when an instance is made; an
    ``nn.Module`` subclass has its ``forward`` decorated, and so has each of its subclasses
    that writes an annotated ``forward`` (a ``SpecError`` when ``forward`` annotates no
    tensor: nothing would be checked); any other class is a ``SpecError``
    (decorate its methods). To cost a model nobody annotated, see
    :func:`typedflops.estimate`.

    >>> import torch
    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> @typed_flops
    ... def linear(x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
    ...            ) -> Float[Tensor, "batch d_out"]:
    ...     return x @ w
    >>> linear(torch.ones(8, 4), torch.ones(4, 3)).shape
    torch.Size([8, 3])
    >>> linear.formula
    2*batch*d_in*d_out
    """
    if fn is not None:
        return _decorate(fn, flops, name)
    return functools.partial(_decorate, flops=flops, name=name)


def _decorate(function: Any, flops: str | None, name: str | None) -> Any:
    """What ``typed_flops`` returns for ``function`` (a module-level function, not a
    closure: a closure calling itself would leave a reference cycle per decoration)."""
    if isinstance(function, CheckedFunction):
        return function  # already decorated: one contract, checked once
    if isinstance(function, type) and issubclass(function, torch.nn.Module):
        return _module_class(function, flops, name)
    if isinstance(function, type):
        if not dataclasses.is_dataclass(function):
            raise SpecError.at(
                f"@typed_flops on class {function.__qualname__.rsplit('<locals>.', 1)[-1]}",
                "it is neither an nn.Module subclass nor a dataclass, and a plain class's "
                "methods are not checked through it",
                hint=(
                    "decorate the methods to check (@typed_flops on __init__, __call__ or forward)"
                ),
            )
        return typed_class(function)
    if isinstance(function, (classmethod, staticmethod)):
        return type(function)(_decorate(function.__func__, flops, name))
    if isinstance(function, property):
        fget, fset, fdel = (
            None if accessor is None else _decorate(accessor, flops, name)
            for accessor in (function.fget, function.fset, function.fdel)
        )
        return property(fget, fset, fdel, function.__doc__)
    return TypedFunction(function, flops=flops, name=name)


def _module_class(cls: type[torch.nn.Module], flops: str | None, name: str | None) -> Any:
    """``@typed_flops`` on an ``nn.Module`` subclass: its ``forward`` is checked (and
    costed) when it has a tensor annotation; otherwise there is nothing to check, which
    is a SpecError rather than a class silently left unchecked."""
    forward = cls.forward
    if isinstance(forward, CheckedFunction):
        if forward not in _BY_SUBCLASS or (flops is None and name is None):
            return cls  # its forward is decorated already
        forward = forward.__wrapped__  # checked as a subclass's: the options are its own
    if not _annotates_a_tensor(forward):
        raise SpecError.at(
            f"@typed_flops on class {cls.__qualname__.rsplit('<locals>.', 1)[-1]}",
            "its forward has no tensor annotation, so there is nothing to check",
            hint="annotate forward's arguments (x: Float[Tensor, 'batch d']), or cost the "
            "model as it is with typedflops.estimate(model, Float[Tensor, 'batch d'], ...)",
        )
    setattr(cls, "forward", TypedFunction(forward, flops=flops, name=name))  # noqa: B010
    _checks_subclasses(cls)
    return cls


#: The forwards checked because a base class was decorated (a decorator on the subclass
#: itself may still give them ``flops=`` or ``name=``).
_BY_SUBCLASS: weakref.WeakSet[CheckedFunction[..., Any]] = weakref.WeakSet()


def _checks_subclasses(cls: type[torch.nn.Module]) -> None:
    """A subclass that writes its own annotated ``forward`` has it checked too (the
    decorator is on the class, so it holds for its subclasses); a ``forward`` without a
    tensor annotation is left as written (the checked one runs where it calls
    ``super().forward``). ``flops=`` and ``name=`` stay the decorated class's own."""
    original = cls.__dict__.get("__init_subclass__")

    def init_subclass(sub: type[torch.nn.Module], /, **kwargs: Any) -> None:
        if isinstance(original, classmethod):
            original.__func__(sub, **kwargs)
        else:
            super(cls, sub).__init_subclass__(**kwargs)
        forward = sub.__dict__.get("forward")
        if (
            forward is not None
            and not isinstance(forward, CheckedFunction)
            and callable(forward)
            and _annotates_a_tensor(forward)
        ):
            checked: TypedFunction[..., Any] = TypedFunction(forward, flops=None, name=None)
            _BY_SUBCLASS.add(checked)
            setattr(sub, "forward", checked)  # noqa: B010

    setattr(cls, "__init_subclass__", classmethod(init_subclass))  # noqa: B010


def _annotates_a_tensor(function: Callable[..., Any]) -> bool:
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except NameError:
        return True  # a forward reference: the contract is compiled at the first call
    except Exception:
        return False
    return any(_contains_tensor_annotation(hint) for hint in hints.values())


def _contains_tensor_annotation(hint: Any) -> bool:
    if is_tensor_annotation(hint):
        return True
    return any(_contains_tensor_annotation(arg) for arg in typing.get_args(hint))
