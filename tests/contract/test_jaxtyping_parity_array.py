"""jaxtyping's ``test/test_array.py``, ported to torch and ``@typed_flops``.

One test per case that applies to torch tensors, in jaxtyping's order (its JAX, NumPy,
PRNG-key and ArrayLike cases are left out). Where typedflops differs from jaxtyping on
purpose, the test asserts typedflops' behaviour and says so (the README's table lists these).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any

import jaxtyping
import numpy as np
import pytest
import torch
from jaxtyping import Bool, Float, Float32, Shaped
from parity_errors import param_error, return_error
from torch import Tensor

from typedflops import ContractError, SpecError, TypedFunction, typed_flops

randn = torch.randn


def test_basic() -> None:
    @typed_flops
    def g(x: Shaped[Tensor, "..."]) -> None:
        pass

    g(torch.tensor(1.0))


def _annotated(**hints: Any) -> Callable[..., None]:
    """A function of these parameters, annotated with hints made at run time."""

    def f(*args: Any) -> None:
        pass

    parameters = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY) for name in hints]
    f.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    f.__annotations__ = dict(hints)
    return f


def test_dtypes() -> None:
    # The torch dtypes each of jaxtyping's dtype classes allows, resolved at decoration.
    for name in ("Float", "Float16", "BFloat16", "Float32", "Float64", "Int", "UInt8", "Bool"):
        dtype = getattr(jaxtyping, name)
        assert isinstance(typed_flops(_annotated(x=dtype[Tensor, " n"])), TypedFunction)


def test_return() -> None:
    @typed_flops
    def g(x: Float[Tensor, "b c"]) -> Float[Tensor, "c b"]:
        return torch.transpose(x, 0, 1)

    g(randn(3, 4))

    @typed_flops
    def h(x: Float[Tensor, "b c"]) -> Float[Tensor, "b c"]:
        return torch.transpose(x, 0, 1)

    with return_error():
        h(randn(3, 4))


def test_two_args() -> None:
    @typed_flops
    def g(x: Shaped[Tensor, "b c"], y: Shaped[Tensor, "c d"]) -> Tensor:
        return x @ y

    g(randn(3, 4), randn(4, 5))
    with param_error():
        g(randn(3, 4), randn(5, 4))

    @typed_flops
    def h(x: Shaped[Tensor, "b c"], y: Shaped[Tensor, "c d"]) -> Shaped[Tensor, "b d"]:
        return x @ y

    h(randn(3, 4), randn(4, 5))
    with param_error():
        h(randn(3, 4), randn(5, 4))


def test_any_dtype() -> None:
    @typed_flops
    def g(x: Shaped[Tensor, "a b"]) -> Shaped[Tensor, "a b"]:
        return x

    g(randn(3, 4))
    g(torch.tensor([[True, False]]))
    for dtype in (torch.int8, torch.uint8, torch.uint16, torch.complex64, torch.bfloat16):
        g(torch.zeros(2, 2, dtype=dtype))
    with param_error():
        g(randn(1))


def test_nested_jaxtyped() -> None:
    @typed_flops
    def g(x: Float32[Tensor, "b c"], transpose: bool) -> Float32[Tensor, "c b"]:
        return h(x, transpose)

    @typed_flops
    def h(x: Float32[Tensor, "c b"], transpose: bool) -> Float32[Tensor, "b c"]:
        return torch.transpose(x, 0, 1) if transpose else x

    g(randn(2, 3), True)
    g(randn(3, 3), True)
    g(randn(3, 3), False)
    with return_error():
        g(randn(2, 3), False)


def test_nested_nojaxtyped() -> None:
    @typed_flops
    def g(x: Float32[Tensor, "b c"]) -> None:
        return h(x)

    @typed_flops
    def h(x: Float32[Tensor, "c b"]) -> None:
        return None

    # Differs on purpose: jaxtyping's plain @beartype helper shares its caller's dims (and
    # raises here); every @typed_flops call has a scope of its own, so `h` binds c=2, b=3.
    g(randn(2, 3))


def test_isinstance() -> None:
    @typed_flops
    def g(x: Float32[Tensor, "b c"]) -> Float32[Tensor, " z"]:
        y = torch.transpose(x, 0, 1)
        assert isinstance(y, Float32[Tensor, "c b"])  # type: ignore[arg-type]
        assert not isinstance(y, Float32[Tensor, "b z"])  # type: ignore[arg-type]  # z left unbound as b!=c
        out = randn(500)
        assert isinstance(out, Float32[Tensor, "z"])  # type: ignore[arg-type]  # z now bound
        return out

    g(randn(2, 3))


def test_fixed() -> None:
    @typed_flops
    def g(x: Float32[Tensor, "4 5 foo"], y: Float32[Tensor, " foo"]) -> Float32[Tensor, "4 5"]:
        return x @ y

    a, b = randn(4, 5, 2), randn(2)
    assert g(a, b).shape == (4, 5)
    with param_error():
        g(randn(3, 5, 2), b)


def test_anonymous() -> None:
    @typed_flops
    def g(x: Float32[Tensor, "foo _"], y: Float32[Tensor, " _"]) -> None:
        pass

    g(randn(3, 4), randn(5))


def test_named_variadic() -> None:
    @typed_flops
    def g(
        x: Float32[Tensor, "*batch foo"], y: Float32[Tensor, " *batch"], z: Float32[Tensor, " foo"]
    ) -> None:
        pass

    c = randn(5)
    a1, b1 = randn(5), randn(())
    g(a1, b1, c)
    a2, b2 = randn(3, 5), randn(3)
    g(a2, b2, c)
    with param_error():
        g(a1, b2, c)
    with param_error():
        g(a2, b1, c)

    @typed_flops
    def h(x: Float32[Tensor, " foo *batch"], y: Float32[Tensor, " foo *batch bar"]) -> None:
        pass

    a, b, c = randn(4), randn(4, 3), randn(3, 4)
    h(a, b)
    with param_error():
        h(a, c)
    with param_error():
        h(b, c)


def test_anonymous_variadic() -> None:
    @typed_flops
    def g(x: Float32[Tensor, "... foo"], y: Float32[Tensor, " foo"]) -> None:
        pass

    a1, a2, a3 = randn(5), randn(3, 5), randn(3, 4, 5)
    b, c = randn(5), randn(1)
    g(a1, b)
    g(a2, b)
    g(a3, b)
    for a in (a1, a2, a3):
        with param_error():
            g(a, c)


def test_broadcast_fixed() -> None:
    @typed_flops
    def g(x: Float32[Tensor, "#4"]) -> None:
        pass

    g(randn(4))
    g(randn(1))
    with param_error():
        g(randn(3))


def test_broadcast_named() -> None:
    @typed_flops
    def g(x: Float32[Tensor, " #foo"], y: Float32[Tensor, " #foo"]) -> None:
        pass

    a, b, c = randn(3), randn(4), randn(1)
    for x, y in ((a, a), (b, b), (c, c), (a, c), (b, c), (c, a), (c, b)):
        g(x, y)
    with param_error():
        g(a, b)
    with param_error():
        g(b, a)


def test_broadcast_variadic_named() -> None:
    @typed_flops
    def g(x: Float32[Tensor, " *#foo"], y: Float32[Tensor, " *#foo"]) -> None:
        pass

    a, b, c, d = randn(3), randn(4), randn(4, 4), randn(5, 6)
    j, k, l, m = randn(1), randn(1, 4), randn(5, 1), randn(1, 1)  # noqa: E741
    n, o = randn(2, 1), randn(1, 6)
    passing = [(a, a), (b, b), (c, c), (d, d), (b, c), (a, j), (b, j), (c, j), (d, j), (b, k)]
    passing += [(c, k), (d, l), (a, m), (c, m), (d, m), (a, n), (b, n), (o, d)]
    failing = [(a, b), (a, c), (d, b), (d, k), (c, l), (c, n), (d, n), (o, c), (o, a)]
    for x, y in passing:
        g(x, y)
    for x, y in failing:
        with param_error():
            g(x, y)


def test_variadic_mixed_broadcast() -> None:
    @typed_flops
    def f(x: Float[Tensor, " *foo"], y: Float[Tensor, " #*foo"]) -> None:
        pass

    with param_error():
        f(randn(3, 4), randn(5))
    f(randn(7, 3, 2), randn(1, 2))


def test_variadic_mixed_broadcast2() -> None:
    @typed_flops
    def f(x: Float[Tensor, " *#foo"], y: Float[Tensor, " *foo"]) -> None:
        pass

    with param_error():
        f(randn(3, 4), randn(5))
    f(randn(1, 2), randn(7, 3, 2))


def test_variadic_mixed_broadcast3() -> None:
    @typed_flops
    def f(
        x: Float[Tensor, "*B L D"], *, y: Float[Tensor, "*#B J d"], z: Bool[Tensor, "*B L J"]
    ) -> Float[Tensor, "*B L D"]:
        return x

    x = randn(2, 7, 3, 2, 2)
    mask = torch.bernoulli(torch.full((2, 7, 3, 2, 2), 0.5)).bool()
    f(x, y=randn(2, 7, 1, 2, 2), z=mask)


def test_symbolic() -> None:
    @typed_flops
    def make_slice(x: Float32[Tensor, " dim"]) -> Float32[Tensor, " dim-1"]:
        return x[1:]

    @typed_flops
    def cat(x: Float32[Tensor, " dim"]) -> Float32[Tensor, " 2*dim"]:
        return torch.cat([x, x])

    @typed_flops
    def bad_make_slice(x: Float32[Tensor, " dim"]) -> Float32[Tensor, " dim-1"]:
        return x

    @typed_flops
    def bad_cat(x: Float32[Tensor, " dim"]) -> Float32[Tensor, " 2*dim"]:
        return torch.cat([x, x, x])  # type: ignore[shape]  # the wrong return the test is about

    x = randn(5)
    assert make_slice(x).shape == (4,)
    assert cat(x).shape == (10,)
    y = randn(3, 4)
    with param_error():
        make_slice(y)
    with param_error():
        cat(y)
    with return_error():
        bad_make_slice(x)
    with return_error():
        bad_cat(x)


def test_incomplete_symbolic() -> None:
    # jaxtyping raises its AnnotationError at the call; typedflops, at decoration.
    with pytest.raises(SpecError, match="no parameter's annotation binds it"):

        @typed_flops
        def foo(x: Float32[Tensor, " 2*dim"]) -> None:
            pass


def test_deferred_symbolic_good() -> None:
    @typed_flops
    def foo(dim: int, fill: Float[Tensor, ""]) -> Float[Tensor, " {dim}"]:
        return torch.full((dim,), float(fill))

    class A:
        size = 5

        @typed_flops
        def bar(self, fill: Float[Tensor, ""]) -> Float[Tensor, " {self.size}"]:
            return torch.full((self.size,), float(fill))

    foo(3, torch.tensor(0.0))
    A().bar(torch.tensor(0.0))


def test_deferred_symbolic_bad() -> None:
    @typed_flops
    def foo(dim: int, fill: Float[Tensor, ""]) -> Float[Tensor, " {dim-1}"]:
        return torch.full((dim,), float(fill))

    class A:
        size = 5

        @typed_flops
        def bar(self, fill: Float[Tensor, ""]) -> Float[Tensor, " {self.size}-1"]:
            return torch.full((self.size,), float(fill))

    with return_error():
        foo(3, torch.tensor(0.0))
    with return_error():
        A().bar(torch.tensor(0.0))


def test_deferred_symbolic_dataclass() -> None:
    @typed_flops
    @dataclasses.dataclass
    class A:
        value: int
        array: Float[Tensor, " {value}"]

    A(3, torch.zeros(3))
    with param_error():
        A(3, torch.zeros(4))


def _checks(annotation: Any, shape: tuple[int, ...]) -> bool:
    f = typed_flops(_annotated(x=annotation))
    try:
        f(torch.zeros(shape))
    except ContractError:
        return False
    return True


def test_ignored_names() -> None:
    x = Float[Tensor, "foo=4"]
    assert _checks(x, (4,))
    assert not _checks(x, (5,))
    assert not _checks(x, (4, 5))
    y = Float[Tensor, "bar qux foo=bar+qux"]
    assert _checks(y, (2, 3, 5))
    assert not _checks(y, (2, 3, 6))
    z = Float[Tensor, "bar #foo=bar"]
    assert _checks(z, (3, 3))
    assert _checks(z, (3, 1))
    assert not _checks(z, (3, 4))
    w = Float[Tensor, "bar foo=#bar"]  # weird but legal
    assert _checks(w, (3, 3))
    assert _checks(w, (3, 1))
    assert not _checks(w, (3, 4))


def test_symbolic_functions() -> None:
    # Differs on purpose: jaxtyping evaluates "min(foo,bar)" with Python; typedflops
    # evaluates nothing (names, integers, + - * / // ** only) and says so at decoration.
    with pytest.raises(SpecError, match=r"function calls such as 'min\(foo,bar\)' are not allowed"):
        _checks(Float[Tensor, "foo bar min(foo,bar)"], (2, 3, 2))


def test_extension() -> None:
    x_type: Any = Float[Tensor, "a"]
    y_type: Any = Float[x_type, "b"]
    assert y_type.dim_str == "b a"
    f = typed_flops(_annotated(a=x_type, b=y_type))

    a, b, c = randn(3, 4), randn(4), randn(3)
    f(b, a)
    with param_error():
        f(c, a)
    with param_error():
        f(a, a)


def test_custom_array() -> None:
    class MyArray1:
        dtype = "foo"
        shape = (3,)

    class FooDtype(jaxtyping.AbstractDtype):
        dtypes = ["foo"]  # noqa: RUF012 (jaxtyping's own attribute)

    class MyArray2(MyArray1):
        dtype = "bar"

    class MyArray3(MyArray1):
        shape = (4,)

    # Another array type is checked as jaxtyping checks it: its type, dtype and shape.
    f = typed_flops(_annotated(x=typing.cast(Any, FooDtype)[MyArray1, "3"]))
    f(MyArray1())
    with param_error():
        f(MyArray2())
    with param_error():
        f(MyArray3())
    with param_error():
        f(torch.ones(3))


def test_any() -> None:
    @typed_flops
    def f(x: Float[Any, "foo bar"]) -> None:
        pass

    f(torch.arange(12.0).reshape(3, 4))
    with param_error():
        f(torch.arange(12.0).reshape(3, 2, 2))  # wrong shape
    with param_error():
        f(torch.arange(12).reshape(3, 4))  # wrong dtype
    with param_error():
        f(1)  # not an array
    # Differs on purpose: with an array type of Any, jaxtyping takes any object with a
    # shape and a dtype; typedflops takes torch tensors only.
    with param_error():
        f(np.arange(12.0).reshape(3, 4))


def test_uniontype() -> None:
    @typed_flops
    def f(x: Float[Tensor, ""] | None) -> None:
        pass

    f(None)
    f(torch.tensor(1.0))
    with param_error():
        f(torch.tensor([1.0, 2.0]))
