"""The tester module of jaxtyping's ``test/test_import_hook.py``, ported to torch and run
through typedflops' import hook: one test per section of it.

Where typedflops differs from jaxtyping on purpose, the test asserts typedflops' behaviour
and says so (the README's table lists these).
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from parity_errors import param_error, return_error

from typedflops.tools.import_hook import install_import_hook

HOOK_TESTER = """
import dataclasses
from functools import wraps
from typing import no_type_check

import torch
from jaxtyping import Float32, Int, Shaped
from torch import Tensor


def g(x: Float32[Tensor, " b"]):
    pass


@dataclasses.dataclass
class D:
    foo: int
    bar: Float32[Tensor, " a"]


class N(torch.nn.Module):
    def __init__(self, foo: str):
        super().__init__()
        self.a = torch.tensor(1)

    def foo(self, x: Shaped[Tensor, "..."]):
        pass

    def bar(self) -> Shaped[Tensor, "..."]:
        return self.a


called = False


class Base:
    def __init__(self):
        self.x = "not an int"
        global called
        assert not called
        called = True


class Derived(Base):
    def __init__(self):
        assert not called
        super().__init__()
        assert called
        self.x = 2


class Foo:
    pass


@dataclasses.dataclass
class Bar:
    x: type[Foo]
    y: "type[Foo]"
    z: Float32[Tensor, " n"]


def isinstance_test(x):
    assert isinstance(x, Float32[Tensor, " b"])


@no_type_check
def f(_: Float32[Tensor, "foo bar"]):
    pass


class CustomGeneric:
    def __init__(self, arg):
        self.arg = arg


class CustomType:
    def __class_getitem__(cls, item):
        return CustomGeneric(item)


@no_type_check
def invalid_hint_func(x: CustomType[int]):
    pass


@no_type_check
class InvalidHintClass:
    def method(self, x: CustomType[int]):
        pass


def dummy_decorator(fn):
    @wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@dummy_decorator
@no_type_check
@dummy_decorator
def decorated_func(x: CustomType[int]):
    pass


@no_type_check
def outer_func():
    def inner_func(x: CustomType[int]):
        pass

    inner_func(None)


@no_type_check
class OuterClass:
    class InnerClass:
        def method(self, x: CustomType[int]):
            pass
"""


@pytest.fixture(scope="module")
def tester(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    directory: Path = tmp_path_factory.mktemp("hooked")
    (directory / "parity_hook_tester.py").write_text(textwrap.dedent(HOOK_TESTER))
    sys.path.insert(0, str(directory))
    try:
        with install_import_hook("parity_hook_tester"):
            yield importlib.import_module("parity_hook_tester")
    finally:
        sys.path.remove(str(directory))
        sys.modules.pop("parity_hook_tester", None)


def test_hook_functions_get_checked(tester: Any) -> None:
    tester.g(torch.tensor([1.0]))
    with param_error():
        tester.g(torch.tensor(1))


def test_hook_dataclasses_get_checked(tester: Any) -> None:
    tester.D(1, torch.tensor([1.0]))
    with param_error():
        tester.D(1.0, torch.tensor([1.0]))
    with param_error():
        tester.D(1, torch.tensor(1.0))


def test_hook_methods_get_checked(tester: Any) -> None:
    n = tester.N("hi")
    # As jaxtyping's hook, every annotated function is checked: `foo: str` too.
    with param_error():
        tester.N(123)
    with param_error():
        n.foo("not_an_array_either")
    n.a = "not_an_array"
    with return_error():
        n.bar()


def test_hook_not_called_in_super(tester: Any) -> None:
    tester.Derived()


def test_hook_stringified_annotations(tester: Any) -> None:
    tester.Bar(tester.Foo, tester.Foo, torch.ones(2))
    with param_error():
        tester.Bar(1, tester.Foo, torch.ones(2))


def test_hook_isinstance_without_annotations(tester: Any) -> None:
    tester.isinstance_test(torch.tensor([1.0]))
    with pytest.raises(AssertionError):
        tester.isinstance_test(torch.tensor(1.0))


def test_hook_no_type_check(tester: Any) -> None:
    tester.f("not an array")
    tester.invalid_hint_func(None)
    tester.InvalidHintClass().method(None)
    tester.decorated_func(None)
    tester.outer_func()
    tester.OuterClass.InnerClass().method(None)
