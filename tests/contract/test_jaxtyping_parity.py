"""jaxtyping's own test suite, ported to torch and ``@typed_flops``.

One test per case of jaxtyping's ``test/`` folder that applies to torch tensors
(``test_decorator``, ``test_generators``, ``test_threading``, ``test_messages``, in its
order; ``test_array`` and the import-hook tester have files of their own). Cases about JAX,
NumPy or other array types, PyTrees and jaxtyping's own annotation objects are left out. A
``@jaxtyped(typechecker=...)`` function becomes a ``@typed_flops`` one, jaxtyping's
``ParamError``/``ReturnError`` a :class:`ContractError` on an argument or on the return
value. Where typedflops differs from jaxtyping on purpose, the test asserts typedflops'
behaviour and says so (the README's table lists these).
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import gc
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, no_type_check

import jaxtyping
import pytest
import torch
from jaxtyping import Float, Shaped
from parity_errors import param_error, return_error
from torch import Tensor

from typedflops import ContractError, SpecError, typed_flops

randn = torch.randn


# == test_decorator.py =========================================================================


class M(metaclass=abc.ABCMeta):
    @typed_flops
    def f(self) -> None:
        return None

    @typed_flops
    @classmethod
    def g1(cls) -> int:
        return 3

    @classmethod
    @typed_flops
    def g2(cls) -> int:
        return 4

    @typed_flops
    @staticmethod
    def h1() -> int:
        return 3

    @staticmethod
    @typed_flops
    def h2() -> int:
        return 4

    @typed_flops
    @abc.abstractmethod
    def i1(self) -> None: ...

    @abc.abstractmethod
    @typed_flops
    def i2(self) -> None: ...


class N:
    @typed_flops  # type: ignore[prop-decorator]
    @property
    def j1(self) -> int:
        return 3

    @property
    @typed_flops
    def j2(self) -> int:
        return 4


def test_identity() -> None:
    assert M.f is M.f


def test_classmethod() -> None:
    assert M.g1() == 3
    assert M.g2() == 4


def test_staticmethod() -> None:
    assert M.h1() == 3
    assert M.h2() == 4


def test_abstractmethod() -> None:
    assert M.i1.__isabstractmethod__
    assert M.i2.__isabstractmethod__


def test_property() -> None:
    assert N().j1 == 3
    assert N().j2 == 4


def test_varargs() -> None:
    @typed_flops
    def f(*args: Any) -> None:
        pass

    f(1, 2)


def test_varkwargs() -> None:
    @typed_flops
    def f(**kwargs: Any) -> None:
        pass

    f(a=1, b=2)


def test_defaults() -> None:
    @typed_flops
    def f(x: int, y: int = 1) -> None:
        pass

    f(1)


def test_default_bindings() -> None:
    @typed_flops
    def f(x: int, y: int = 1) -> Float[Tensor, "x {y}"]:
        return randn(x, y)

    f(1)
    f(1, 1)
    f(1, 0)
    f(1, 5)


class _GlobalFoo:
    pass


def test_global_stringified_annotation() -> None:
    @typed_flops
    def f(x: _GlobalFoo) -> _GlobalFoo:
        return x

    f(_GlobalFoo())

    @typed_flops
    def g(x: int) -> _GlobalFoo:
        return x  # type: ignore[return-value]

    @typed_flops
    def h(x: _GlobalFoo) -> int:
        return x  # type: ignore[return-value]

    with return_error():
        g(1)
    with param_error():
        h(1)  # type: ignore[arg-type]


def test_local_stringified_annotation() -> None:
    class LocalFoo:
        pass

    @typed_flops
    def f(x: LocalFoo) -> LocalFoo:
        return x

    f(LocalFoo())
    # jaxtyping only hopes not to raise a spurious error here; typedflops resolves the
    # local class and checks it.
    with param_error():
        f(1)  # type: ignore[arg-type]


def test_print_bindings(capfd: pytest.CaptureFixture[str]) -> None:
    @typed_flops
    def f(x: Float[Tensor, "foo bar"]) -> None:
        jaxtyping.print_bindings()  # type: ignore[no-untyped-call]

    capfd.readouterr()
    f(torch.zeros(3, 4))
    text, _ = capfd.readouterr()
    assert text == (
        "The current values for each jaxtyping axis annotation are as follows.\nfoo=3\nbar=4\n"
    )


def test_no_type_check() -> None:
    @typed_flops
    @no_type_check
    def f(x: Float[Tensor, "foo bar"]) -> None:
        pass

    @no_type_check
    @typed_flops
    def g(x: Float[Tensor, "foo bar"]) -> None:
        pass

    @typed_flops
    @no_type_check
    @dataclasses.dataclass
    class Foo:
        x: Float[Tensor, "foo bar"]

    @no_type_check
    @typed_flops
    @dataclasses.dataclass
    class Bar:
        x: Float[Tensor, "foo bar"]

    f("not an array")
    g("not an array")
    Foo(x="not an array")  # type: ignore[arg-type]
    Bar(x="not an array")  # type: ignore[arg-type]


def test_no_garbage() -> None:
    gc.collect()
    gc.collect()
    gc.garbage.clear()
    gc.disable()
    try:

        @typed_flops
        @dataclasses.dataclass
        class _Obj:
            x: int

        _Obj(x=5)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        assert gc.garbage == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_no_rewrapping_of_dataclass_init() -> None:
    @typed_flops
    @dataclasses.dataclass
    class Foo:
        x: int

        @typed_flops  # type: ignore[misc]
        def __init__(self, x: int) -> None:
            self.x = x

    wrapped = Foo.__init__.__wrapped__
    with pytest.raises(AttributeError):
        wrapped.__wrapped__  # noqa: B018


def test_stringified_multiple_variadic() -> None:
    # Differs on purpose: jaxtyping leaves a string annotation it cannot build unchecked;
    # typedflops says at decoration that "*foo *bar" is not a valid annotation.
    with pytest.raises(SpecError, match="cannot resolve its type hints"):

        @typed_flops
        def foo() -> 'Float[Tensor, "*foo *bar"]':
            return torch.arange(3.0)


class _GlobalBar:
    @typed_flops
    def returns_self(self) -> _GlobalBar:
        return self

    @typed_flops
    def returns_tuple(self) -> tuple[_GlobalBar, int]:
        return self, 1


def test_stringified_forward_annotation() -> None:
    bar = _GlobalBar()
    bar.returns_self()
    bar.returns_tuple()


# == test_generators.py ========================================================================


def test_generators_simple() -> None:
    @typed_flops
    def gen(x: Float[Tensor, "*"]) -> Iterator[Float[Tensor, "*"]]:
        yield x

    @typed_flops
    def foo() -> None:
        next(gen(torch.zeros(2)))
        next(gen(torch.zeros(3, 4)))

    foo()


def test_generators_return_no_annotations() -> None:
    @typed_flops
    def gen(x: Float[Tensor, "*"]):  # type: ignore[no-untyped-def]
        yield x

    @typed_flops
    def foo():  # type: ignore[no-untyped-def]
        next(gen(torch.zeros(2)))
        next(gen(torch.zeros(3, 4)))

    foo()


def test_async_generators_simple() -> None:
    @typed_flops
    async def gen(x: Float[Tensor, "*"]) -> AsyncIterator[Float[Tensor, "*"]]:
        yield x

    @typed_flops
    async def foo() -> None:
        async for _ in gen(torch.zeros(2)):
            pass
        async for _ in gen(torch.zeros(3, 4)):
            pass

    asyncio.run(foo())


def test_generators_dont_modify_same_annotations() -> None:
    @typed_flops
    def g(x: Float[Tensor, "1"]) -> Iterator[Float[Tensor, "1"]]:
        yield x

    @typed_flops
    def m(x: Float[Tensor, "1"]) -> Float[Tensor, "1"]:
        return x

    with param_error():
        next(g(torch.zeros(2)))
    with param_error():
        m(torch.zeros(2))


def test_generators_original_issue() -> None:
    @typed_flops
    def g(x: Shaped[Tensor, "*"]) -> Iterator[Shaped[Tensor, "*"]]:
        yield x

    @typed_flops
    def f() -> None:
        next(g(torch.zeros(1)))
        next(g(torch.zeros(2)))

    f()


# == test_threading.py ===========================================================================


def _in_thread(target: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def test_threading_jaxtyped() -> None:
    @typed_flops
    def add(x: Float[Tensor, "a b"], y: Float[Tensor, "a b"]) -> Float[Tensor, "a b"]:
        return x + y

    def run() -> None:
        add(torch.tensor([[1.0, 2.0]]), torch.tensor([[2.0, 3.0]]))

    _in_thread(run)


def test_threading_nojaxtyped() -> None:
    def run() -> None:
        assert isinstance(torch.tensor([[1.0, 2.0]]), Float[Tensor, "..."])  # type: ignore[arg-type]

    _in_thread(run)


# == test_messages.py (the same information, in typedflops' words) ===============================


def test_arg_localisation() -> None:
    @typed_flops
    def f(x: str, y: str, z: int) -> None:
        pass

    with pytest.raises(ContractError) as caught:
        f("hi", "bye", "not-an-int")  # type: ignore[arg-type]
    assert str(caught.value) == (
        "f(): argument 'z' violates its hint int: str 'not-an-int' not instance of int"
    )

    @typed_flops
    def g(x: Float[Tensor, "a b"], y: Float[Tensor, "b c"]) -> None:
        pass

    with pytest.raises(ContractError) as caught:
        g(torch.zeros(2, 3), y=torch.zeros(4, 3))
    assert str(caught.value).splitlines() == [
        "g(): argument 'y' has shape (4, 3) but its annotation \"b c\" needs b=3",
        "  b=3 was bound by argument 'x' (shape (2, 3), axis 1)",
        "  bound so far: a=2, b=3",
    ]
    assert (caught.value.function, caught.value.argument) == ("g", "y")


def test_dataclass_init() -> None:
    @typed_flops
    @dataclasses.dataclass
    class Mod:
        x: Float[Tensor, " *foo"]
        z: int

    with pytest.raises(ContractError) as caught:
        Mod(torch.zeros(2, 3), "not-an-int")  # type: ignore[arg-type]
    assert str(caught.value).splitlines() == [
        "Mod.__init__(): argument 'z' violates its hint int: str 'not-an-int' not instance of int",
        "  bound so far: foo=(2, 3)",
    ]
