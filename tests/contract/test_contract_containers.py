"""The compiled contract on containers: every element of a list, a sequence, a tuple or a
dict is checked, optional values and unions of ranks included, in arguments and in the
return value."""

from __future__ import annotations

import re
import typing
from collections.abc import Sequence

import pytest
import torch
from filled import ones
from jaxtyping import Float, Int
from torch import Tensor

from typedflops import ContractError, DtypeError, ShapeError, typed_flops


@pytest.mark.parametrize("bad_index", [0, 1, 57, 99])
def test_every_list_element_is_checked(bad_index: int) -> None:
    @typed_flops
    def f(xs: list[Float[Tensor, "n d"]], y: Float[Tensor, " d"]) -> None:
        pass

    good = [ones(2, 3) for _ in range(100)]
    f(good, ones(3))
    bad = list(good)
    bad[bad_index] = ones(2, 4) if bad_index else ones(2, 5)
    for _ in range(20):
        with pytest.raises(
            ShapeError,
            match=re.escape(f"argument 'xs[{bad_index}]'")
            if bad_index
            else re.escape("argument 'xs[1]'"),
        ):
            f(bad, ones(3))


def test_every_list_element_dtype_is_checked() -> None:
    @typed_flops
    def f(xs: list[Float[Tensor, " n"]]) -> None:
        pass

    xs = [ones(2) for _ in range(100)]
    xs[63] = ones(2, dtype=torch.int64)
    with pytest.raises(DtypeError, match=re.escape("argument 'xs[63]' has dtype int64")):
        f(xs)


def test_sequence_and_variadic_tuple() -> None:
    @typed_flops
    def f(xs: Sequence[Float[Tensor, " n"]], ys: tuple[Float[Tensor, " n"], ...]) -> None:
        pass

    f([ones(2)], (ones(2), ones(2)))
    f((), ())
    with pytest.raises(ShapeError, match=re.escape("argument 'ys[2]'")):
        f([ones(2)], (ones(2), ones(2), ones(3)))
    with pytest.raises(ContractError, match=re.escape("is an int but its hint needs a")):
        f(1, ())  # type: ignore[arg-type]


def test_fixed_tuple() -> None:
    @typed_flops
    def f(pair: tuple[Float[Tensor, " n"], Int[Tensor, " n"]]) -> None:
        pass

    f((ones(3), ones(3, dtype=torch.int64)))
    with pytest.raises(DtypeError, match=re.escape("argument 'pair[1]' has dtype float32")):
        f((ones(3), ones(3)))
    with pytest.raises(ContractError, match=re.escape("needs a tuple of 2")):
        f((ones(3),))  # type: ignore[arg-type]


def test_dict_values_and_keys() -> None:
    @typed_flops
    def f(named: dict[str, Float[Tensor, " n"]]) -> None:
        pass

    f({"a": ones(3), "b": ones(3)})
    with pytest.raises(ShapeError, match=re.escape("argument 'named['b']' has shape (2,)")):
        f({"a": ones(3), "b": ones(2)})
    with pytest.raises(ContractError, match=re.escape("has key 1 that violates str")):
        f({1: ones(3)})  # type: ignore[dict-item]
    with pytest.raises(ContractError, match=re.escape("is a list but its hint needs a mapping")):
        f([ones(3)])  # type: ignore[arg-type]


def test_optional_tensor() -> None:
    @typed_flops
    def f(x: Float[Tensor, " n"], bias: Float[Tensor, " n"] | None = None) -> None:
        pass

    f(ones(3))
    f(ones(3), None)
    f(ones(3), bias=ones(3))
    with pytest.raises(ShapeError, match=re.escape("argument 'bias' has shape (4,)")):
        f(ones(3), ones(4))
    with pytest.raises(ContractError, match=re.escape("argument 'bias' is an int but")):
        f(ones(3), 4)  # type: ignore[arg-type]


def test_optional_list() -> None:
    @typed_flops
    def f(xs: typing.Optional[list[Float[Tensor, " n"]]]) -> None:  # noqa: UP045
        pass

    f(None)
    with pytest.raises(ShapeError, match=re.escape("argument 'xs[1]'")):
        f([ones(2), ones(3)])


def test_union_of_ranks_keeps_the_matching_bindings() -> None:
    @typed_flops
    def f(x: Float[Tensor, " n"] | Float[Tensor, "n m"], y: Float[Tensor, " m"]) -> None:
        pass

    f(ones(3), ones(7))
    f(ones(3, 4), ones(4))
    with pytest.raises(ShapeError, match=re.escape("argument 'y' has shape (5,)")):
        f(ones(3, 4), ones(5))
    with pytest.raises(ContractError, match=re.escape("is a str which matches none of")):
        f("x", ones(5))  # type: ignore[arg-type]


def test_list_in_the_return_value() -> None:
    @typed_flops
    def f(x: Float[Tensor, " n"]) -> list[Float[Tensor, " n"]]:
        return [x, torch.ones(4)]

    with pytest.raises(ShapeError) as info:
        f(ones(2))
    assert str(info.value).startswith("f(): the return value[1] has shape (4,)")
    assert info.value.argument == "return"
