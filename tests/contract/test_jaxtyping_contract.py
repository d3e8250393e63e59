"""jaxtyping's contract beyond plain functions: dataclasses, properties, no_type_check,
generators, hint forms, isinstance in a checked body, print_bindings, deferred dims, named and
variadic dims, string annotations of local classes."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import inspect
import re
import typing
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Generator,
    Iterable,
    Iterator,
    MutableMapping,
)
from typing import Annotated, Any, no_type_check

import jaxtyping
import pytest
import torch
from jaxtyping import Float, Float32, Int
from torch import Tensor

from typedflops import ContractError, ShapeError, SpecError, TypedFunction, typed_flops
from typedflops import print_bindings as typedflops_print_bindings
from typedflops.contract.function import CheckedFunction
from typedflops.contract.scope import current_call

ones = torch.ones


# -- dataclasses ------------------------------------------------------------------------------


@typed_flops
@dataclasses.dataclass
class Batch:
    inputs: Float[Tensor, "n d"]
    labels: Int[Tensor, " n"]
    weight: float = 1.0


def test_a_decorated_dataclass_stays_a_class_and_checks_its_fields() -> None:
    assert inspect.isclass(Batch)
    batch = Batch(ones(4, 3), torch.zeros(4, dtype=torch.long))
    assert isinstance(batch, Batch)
    assert dataclasses.replace(batch, weight=2.0).weight == 2.0
    with pytest.raises(ShapeError) as caught:
        Batch(ones(4, 3), torch.zeros(5, dtype=torch.long))
    assert str(caught.value).splitlines() == [
        "Batch.__init__(): argument 'labels' has shape (5,) but its annotation \"n\" needs n=4",
        "  n=4 was bound by argument 'inputs' (shape (4, 3), axis 0)",
        "  bound so far: n=4, d=3",
    ]
    with pytest.raises(ContractError, match="argument 'weight' violates its hint float"):
        Batch(ones(4, 3), torch.zeros(4, dtype=torch.long), weight="heavy")  # type: ignore[arg-type]


def test_a_plain_class_is_refused_where_jaxtyping_returns_it_unchecked() -> None:
    class Plain:
        def __init__(self, x: Float[Tensor, " n"]) -> None:
            self.x = x

    original_init = Plain.__init__
    with pytest.raises(SpecError, match=r"^@typed_flops on class Plain: it is neither"):
        typed_flops(Plain)
    assert Plain.__init__ is original_init


def test_decorating_twice_wraps_init_once() -> None:
    @dataclasses.dataclass
    class Twice:
        x: Float[Tensor, " n"]

    init = vars(typed_flops(typed_flops(Twice)))["__init__"]
    assert isinstance(init, CheckedFunction)  # checked; a dataclass's __init__ has no cost model
    assert not isinstance(init.__wrapped__, CheckedFunction)


# -- decorator order ----------------------------------------------------------------------------


class Shapes(metaclass=abc.ABCMeta):
    def __init__(self, w: Tensor) -> None:
        self.w = w

    @typed_flops  # type: ignore[prop-decorator]
    @property
    def over_property(self) -> Float[Tensor, "a b"]:
        return self.w

    @property
    @typed_flops
    def under_property(self) -> Float[Tensor, "a b"]:
        return self.w

    @typed_flops
    @abc.abstractmethod
    def abstract(self) -> None: ...


def test_property_on_either_side() -> None:
    shapes = type("Concrete", (Shapes,), {"abstract": lambda self: None})(ones(2, 3))
    assert shapes.over_property.shape == shapes.under_property.shape == (2, 3)
    shapes.w = ones(2)
    for name in ("over_property", "under_property"):
        with pytest.raises(ShapeError, match="the return value has shape"):
            getattr(shapes, name)
    assert Shapes.abstract.__isabstractmethod__
    assert Shapes.over_property.__doc__ is None


def test_no_type_check_on_either_side() -> None:
    @typed_flops
    @no_type_check
    def inner(x: Float[Tensor, "a b"]) -> None:
        pass

    @no_type_check
    @typed_flops
    def outer(x: Float[Tensor, "a b"]) -> None:
        pass

    @typed_flops
    @no_type_check
    @dataclasses.dataclass
    class Inside:
        x: Float[Tensor, "a b"]

    @no_type_check
    @typed_flops
    @dataclasses.dataclass
    class Outside:
        x: Float[Tensor, "a b"]

    for call in (inner, outer, Inside, Outside):
        typing.cast(Any, call)("not a tensor")
    assert isinstance(outer, TypedFunction) and outer.__no_type_check__
    outer.__no_type_check__ = False  # and back on
    with pytest.raises(ContractError, match="argument 'x' is a str"):
        outer("not a tensor")


# -- generators -----------------------------------------------------------------------------


@typed_flops
def batches(x: Float[Tensor, "n d"], size: int) -> Iterator[Float[Tensor, "b d"]]:
    assert current_call() is not None and current_call().sizes["n"] == x.shape[0]  # type: ignore[union-attr]
    for start in range(0, x.shape[0], size):
        yield x[start : start + size]


@typed_flops
def consume(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    # A generator's body runs in its own call's scope, not in its consumer's.
    assert [b.shape for b in batches(ones(5, 3), 2)] == [(2, 3), (2, 3), (1, 3)]
    return x


def test_generator_scope_lives_with_the_generator() -> None:
    assert consume(ones(7)).shape == (7,)  # n=7 here, n=5 in batches: no cross-talk
    with pytest.raises(ShapeError, match="argument 'x' has shape"):
        batches(ones(5), 2)  # arguments are checked when it is called, before any step


def test_yielded_values_are_checked_against_the_arguments_dims() -> None:
    @typed_flops
    def wrong(x: Float[Tensor, "n d"]) -> Iterator[Float[Tensor, "b d"]]:
        yield x
        yield ones(1, 4)

    steps = wrong(ones(2, 3))
    assert next(steps).shape == (2, 3)
    with pytest.raises(ShapeError) as caught:
        next(steps)
    assert str(caught.value).splitlines()[0] == (
        'wrong(): the yielded value has shape (1, 4) but its annotation "b d" needs d=3'
    )
    assert caught.value.argument == "yield"


def test_generator_send_throw_and_return_value() -> None:
    @typed_flops
    def echo(
        x: Float[Tensor, " n"],
    ) -> Generator[Float[Tensor, " n"], int, Float[Tensor, " m"]]:
        count = yield x
        with contextlib.suppress(KeyError):
            yield x * count
        return ones(count + 1)

    steps = echo(ones(3))
    assert next(steps).shape == (3,)
    assert steps.send(2).tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(StopIteration) as stop:
        steps.throw(KeyError("done"))
    assert stop.value.value.shape == (3,)


def test_async_generators() -> None:
    @typed_flops
    async def stream(x: Float[Tensor, " n"]) -> AsyncIterator[Float[Tensor, " n"]]:
        yield x
        yield ones(x.shape[0] + 1)

    async def collect() -> list[tuple[int, ...]]:
        return [tuple(item.shape) async for item in stream(ones(2))]

    with pytest.raises(ShapeError, match=re.escape("the yielded value has shape (3,)")):
        asyncio.run(collect())

    async def first() -> tuple[int, ...]:
        async for item in stream(ones(4)):
            return tuple(item.shape)
        return ()

    assert asyncio.run(first()) == (4,)


# -- hint forms -------------------------------------------------------------------------------


def test_hint_forms_jaxtyping_accepts() -> None:
    @typed_flops
    def every(
        a: Iterator[Float[Tensor, " n"]],
        b: Iterable[Float[Tensor, " n"]],
        c: Collection[Float[Tensor, " n"]],
        d: MutableMapping[str, Float[Tensor, " n"]],
        e: Annotated[Float[Tensor, " n"], "units: metres"],
        f: Callable[[Float[Tensor, " n"]], Float[Tensor, " n"]],
    ) -> Generator[int, None, None] | None:
        return None

    vector = ones(3)
    every(iter([ones(5)]), [vector], (vector,), {"v": vector}, vector, torch.relu)
    generator = (t for t in [ones(9)])
    every(iter([]), generator, [vector], {}, vector, abs)  # an iterator is never consumed
    assert next(generator).shape == (9,)
    with pytest.raises(ShapeError, match=re.escape("argument 'c[0]' has shape (4,)")):
        every(iter([]), [vector], [ones(4)], {}, vector, abs)
    with pytest.raises(ShapeError, match=re.escape("argument 'd['v']' has shape (4,)")):
        every(iter([]), [vector], [], {"v": ones(4)}, vector, abs)
    with pytest.raises(ShapeError, match=re.escape("argument 'e' has shape (1, 3)")):
        every(iter([]), [vector], [], {}, ones(1, 3), abs)
    with pytest.raises(ContractError, match="argument 'f' is an int but its hint needs a Callable"):
        every(iter([]), [], [], {}, vector, 3)  # type: ignore[arg-type]
    with pytest.raises(ContractError, match="argument 'd' is a dict_items"):
        every(iter([]), [], [], {}.items(), vector, abs)  # type: ignore[arg-type]


# -- isinstance and print_bindings in a checked body --------------------------------------------


def test_isinstance_in_the_body_sees_the_call_dims() -> None:
    @typed_flops
    def body(x: Float32[Tensor, "b c"]) -> Float32[Tensor, " z"]:
        y = x.T
        assert isinstance(y, Float32[Tensor, "c b"])  # type: ignore[arg-type]
        assert not isinstance(y, Float32[Tensor, "b z"])  # type: ignore[arg-type]  # b is bound, and b != c
        out = torch.randn(500)
        assert isinstance(out, Float32[Tensor, " z"])  # type: ignore[arg-type]  # binds z for the return
        return out

    assert body(torch.randn(2, 3)).shape == (500,)

    @typed_flops
    def binds(x: Float[Tensor, " n"]) -> Float[Tensor, " m"]:
        assert isinstance(ones(7), Float[Tensor, " m"])  # type: ignore[arg-type]
        return ones(8)

    with pytest.raises(ShapeError) as caught:
        binds(ones(2))
    assert "m=7 was bound by an isinstance check in the body" in str(caught.value)


def test_print_bindings(capsys: pytest.CaptureFixture[str]) -> None:
    @typed_flops
    def show(x: Float[Tensor, "foo bar"], y: Float[Tensor, "*rest"]) -> None:
        jaxtyping.print_bindings()  # type: ignore[no-untyped-call]
        typedflops_print_bindings()

    show(ones(3, 4), ones(2, 5))
    expected = (
        "The current values for each jaxtyping axis annotation are as follows.\n"
        "foo=3\nbar=4\nrest=(2, 5)\n"
    )
    assert capsys.readouterr().out == expected * 2
    typedflops_print_bindings()  # outside a checked call
    assert capsys.readouterr().out == "\n"


# -- deferred dims, defaults ----------------------------------------------------------------


def test_deferred_dims_read_the_arguments_and_their_defaults() -> None:
    @typed_flops
    def full(x: int, y: int = 1) -> Float[Tensor, "x {y}"]:
        return torch.zeros(x, y)

    assert full(1).shape == (1, 1) and full(2, 5).shape == (2, 5)

    class Sized:
        size = 5

        @typed_flops
        def make(self, fill: Float[Tensor, ""]) -> Float[Tensor, " {self.size}-1"]:
            return torch.full((self.size,), float(fill))

    with pytest.raises(ShapeError) as caught:
        Sized().make(torch.tensor(0.0))
    assert str(caught.value).splitlines()[0] == (
        'Sized.make(): the return value has shape (5,) but its annotation "{self.size}-1" '
        "needs {self.size}-1=4 at axis 0"
    )

    @typed_flops
    @dataclasses.dataclass
    class Sequence:
        length: int
        values: Float[Tensor, " {length}"]

    Sequence(3, ones(3))
    with pytest.raises(ShapeError, match=re.escape("needs {length}=3 at axis 0")):
        Sequence(3, ones(4))


def test_bad_deferred_dims_are_spec_errors() -> None:
    with pytest.raises(SpecError, match=re.escape("deferred dim {x()}: 'x()' is not allowed")):

        @typed_flops
        def call(x: int) -> Float[Tensor, " {x()}"]:
            return ones(x)

    @typed_flops
    def not_int(x: str) -> Float[Tensor, " {x}"]:
        return ones(1)

    with pytest.raises(SpecError, match=re.escape("deferred dim {x} is str 'a', not an integer")):
        not_int("a")


# -- named and variadic dims, local annotations ---------------------------------------------------


def test_named_and_variadic_dims_of_one_name_are_two_dims() -> None:
    @typed_flops
    def both(x: Float[Tensor, " n"], y: Float[Tensor, " *n"], z: Float[Tensor, " *n"]) -> None:
        pass

    both(ones(3), ones(2, 4), ones(2, 4))
    with pytest.raises(ShapeError) as caught:
        both(ones(3), ones(2, 4), ones(2))
    assert str(caught.value).splitlines()[0] == (
        "both(): argument 'z' has shape (2,) but its annotation \"*n\" needs *n=(2, 4)"
    )
    assert caught.value.bindings == {"n": 3, "*n": (2, 4)}


def test_string_annotations_of_local_classes_are_checked() -> None:
    class LocalFoo:
        pass

    @typed_flops
    def keep(x: "LocalFoo") -> "LocalFoo":
        return x

    keep(LocalFoo())
    with pytest.raises(ContractError, match="argument 'x' violates its hint LocalFoo"):
        keep(1)  # type: ignore[arg-type]

    class Later:
        @typed_flops
        def clone(self) -> "Later":  # (a class defined after this method)
            return Later()

    assert isinstance(Later().clone(), Later)
