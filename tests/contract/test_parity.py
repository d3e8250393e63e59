"""Parity with the oracle: ``jaxtyped(typechecker=beartype)`` and ``@typed_flops`` must give
the same verdict (pass or fail) on every (annotations, arguments, return value) case.

Each case annotates a function ``fn(a, b, c)`` (unannotated parameters are left unchecked
by both) and makes it return a fresh tensor of a given shape, so the oracle and typedflops
check exactly the same call. Devices are left out on purpose: jaxtyping does not compare
devices, typedflops does (``DeviceError``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from beartype import beartype
from beartype.roar import BeartypeCallHintViolation
from jaxtyping import (
    BFloat16,
    Bool,
    Complex64,
    Float,
    Float16,
    Float32,
    Float64,
    Int,
    Int64,
    Integer,
    Num,
    Real,
    Shaped,
    TypeCheckError,
    UInt8,
    jaxtyped,
)
from torch import Tensor

from typedflops import ContractError, typed_flops

_PARAMETERS = ("a", "b", "c")


@dataclass(frozen=True)
class Case:
    """Annotations of ``a, b, c`` (in order), the arguments, and the returned value."""

    id: str
    hints: tuple[Any, ...]
    args: tuple[Any, ...]
    returns: Any = None  # a hint for the return value, or None for no return annotation
    result: Any = None  # what the body returns: a shape tuple makes a tensor of that shape
    result_dtype: torch.dtype = torch.float32
    expect_pass: bool = field(default=True)


def t(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.zeros(shape, dtype=dtype)


F = Float[Tensor, "n"]

CASES: list[Case] = [
    # named dims
    Case("named-ok", (Float[Tensor, "n m"], Float[Tensor, "m k"]), (t(2, 3), t(3, 4))),
    Case(
        "named-mismatch",
        (Float[Tensor, "n m"], Float[Tensor, "m k"]),
        (t(2, 3), t(4, 4)),
        expect_pass=False,
    ),
    Case("rank-low", (Float[Tensor, "n m"],), (t(2),), expect_pass=False),
    Case("rank-high", (Float[Tensor, "n"],), (t(2, 3),), expect_pass=False),
    Case("square-ok", (Float[Tensor, "n n"],), (t(3, 3),)),
    Case("square-bad", (Float[Tensor, "n n"],), (t(3, 4),), expect_pass=False),
    Case("scalar-ok", (Float[Tensor, ""],), (t(),)),
    Case("scalar-bad", (Float[Tensor, ""],), (t(1),), expect_pass=False),
    # fixed sizes and name=size
    Case("fixed-ok", (Float[Tensor, "3 n"],), (t(3, 5),)),
    Case("fixed-bad", (Float[Tensor, "3 n"],), (t(4, 5),), expect_pass=False),
    Case("named-fixed-ok", (Float[Tensor, "rows=3 n"],), (t(3, 5),)),
    Case("named-fixed-bad", (Float[Tensor, "rows=3 n"],), (t(2, 5),), expect_pass=False),
    # anonymous dims
    Case("anon-ok", (Float[Tensor, "_ n"], Float[Tensor, "_ n"]), (t(2, 3), t(4, 3))),
    Case(
        "anon-bad",
        (Float[Tensor, "_ n"], Float[Tensor, "_ n"]),
        (t(2, 3), t(2, 4)),
        expect_pass=False,
    ),
    Case("anon-named-ok", (Float[Tensor, "_a n"], Float[Tensor, "_a n"]), (t(2, 3), t(4, 3))),
    # broadcastable dims
    Case("bcast-one-first", (Float[Tensor, "#n"], Float[Tensor, "n"]), (t(1), t(5))),
    Case("bcast-one-second", (Float[Tensor, "n"], Float[Tensor, "#n"]), (t(5), t(1))),
    Case("bcast-bad", (Float[Tensor, "#n"], Float[Tensor, "n"]), (t(2), t(5)), expect_pass=False),
    Case("bcast-fixed-one", (Float[Tensor, "#3"],), (t(1),)),
    Case("bcast-fixed-bad", (Float[Tensor, "#3"],), (t(2),), expect_pass=False),
    # named variadic
    Case("var-ok", (Float[Tensor, "*b n"], Float[Tensor, "*b n"]), (t(2, 3, 4), t(2, 3, 4))),
    Case("var-empty", (Float[Tensor, "*b n"], Float[Tensor, "*b n"]), (t(4), t(4))),
    Case(
        "var-bad",
        (Float[Tensor, "*b n"], Float[Tensor, "*b n"]),
        (t(2, 3, 4), t(3, 3, 4)),
        expect_pass=False,
    ),
    Case(
        "var-len-bad",
        (Float[Tensor, "*b n"], Float[Tensor, "*b n"]),
        (t(2, 4), t(4)),
        expect_pass=False,
    ),
    Case("var-too-few", (Float[Tensor, "*b n m"],), (t(4),), expect_pass=False),
    Case("var-middle", (Float[Tensor, "n *b m"], Float[Tensor, "*b"]), (t(1, 2, 3, 4), t(2, 3))),
    Case(
        "var-suffix-bad",
        (Float[Tensor, "*b n"], Float[Tensor, "n"]),
        (t(2, 4), t(5)),
        expect_pass=False,
    ),
    # broadcastable variadic, in every order of broadcastable and plain
    Case(
        "bvar-plain-then-b",
        (Float[Tensor, "*b n"], Float[Tensor, "#*b n"]),
        (t(2, 3, 4), t(1, 3, 4)),
    ),
    Case(
        "bvar-b-then-plain",
        (Float[Tensor, "#*b n"], Float[Tensor, "*b n"]),
        (t(1, 3, 4), t(2, 3, 4)),
    ),
    Case(
        "bvar-b-then-b", (Float[Tensor, "#*b n"], Float[Tensor, "#*b n"]), (t(1, 3, 4), t(2, 1, 4))
    ),
    Case(
        "bvar-plain-one-then-b",
        (Float[Tensor, "*b n"], Float[Tensor, "#*b n"]),
        (t(1, 3, 4), t(2, 3, 4)),
        expect_pass=False,
    ),
    Case(
        "bvar-incompatible",
        (Float[Tensor, "#*b n"], Float[Tensor, "#*b n"]),
        (t(2, 3, 4), t(5, 3, 4)),
        expect_pass=False,
    ),
    Case(
        "bvar-b-then-plain-smaller",
        (Float[Tensor, "#*b n"], Float[Tensor, "*b n"]),
        (t(2, 3, 4), t(1, 3, 4)),
        expect_pass=False,
    ),
    # anonymous variadic
    Case("ellipsis-ok", (Float[Tensor, "... n"], Float[Tensor, "... n"]), (t(2, 3), t(5, 6, 3))),
    Case(
        "ellipsis-bad",
        (Float[Tensor, "... n"], Float[Tensor, "... n"]),
        (t(2, 3), t(2, 4)),
        expect_pass=False,
    ),
    Case("ellipsis-only", (Float[Tensor, "..."],), (t(2, 3, 4, 5),)),
    # return values and symbolic dims
    Case(
        "return-ok",
        (Float[Tensor, "b i"], Float[Tensor, "i o"]),
        (t(2, 3), t(3, 4)),
        returns=Float[Tensor, "b o"],
        result=(2, 4),
    ),
    Case(
        "return-bad",
        (Float[Tensor, "b i"], Float[Tensor, "i o"]),
        (t(2, 3), t(3, 4)),
        returns=Float[Tensor, "b o"],
        result=(2, 3),
        expect_pass=False,
    ),
    Case("return-not-tensor", (F,), (t(3),), returns=F, result=3, expect_pass=False),
    Case("sym-plus-ok", (F,), (t(3),), returns=Float[Tensor, "n+1"], result=(4,)),
    Case(
        "sym-plus-bad", (F,), (t(3),), returns=Float[Tensor, "n+1"], result=(3,), expect_pass=False
    ),
    Case(
        "sym-product-ok",
        (Float[Tensor, "h dh"],),
        (t(2, 3),),
        returns=Float[Tensor, "h*dh"],
        result=(6,),
    ),
    Case(
        "sym-product-bad",
        (Float[Tensor, "h dh"],),
        (t(2, 3),),
        returns=Float[Tensor, "h*dh"],
        result=(5,),
        expect_pass=False,
    ),
    Case("sym-floordiv-ok", (F,), (t(7),), returns=Float[Tensor, "n//2"], result=(3,)),
    Case(
        "sym-minus-bad", (F,), (t(7),), returns=Float[Tensor, "n-1"], result=(7,), expect_pass=False
    ),
    Case("sym-argument-ok", (F, Float[Tensor, "2*n"]), (t(3), t(6))),
    Case("sym-argument-bad", (F, Float[Tensor, "2*n"]), (t(3), t(5)), expect_pass=False),
    # dtype classes
    Case("float32", (F,), (t(3),)),
    Case("float64", (F,), (t(3, dtype=torch.float64),)),
    Case("float16", (F,), (t(3, dtype=torch.float16),)),
    Case("float-bf16", (F,), (t(3, dtype=torch.bfloat16),)),
    Case("float-int", (F,), (t(3, dtype=torch.int64),), expect_pass=False),
    Case("float-bool", (F,), (t(3, dtype=torch.bool),), expect_pass=False),
    Case("int-int32", (Int[Tensor, "n"],), (t(3, dtype=torch.int32),)),
    Case("int-uint8", (Int[Tensor, "n"],), (t(3, dtype=torch.uint8),), expect_pass=False),
    Case("int-float", (Int[Tensor, "n"],), (t(3),), expect_pass=False),
    Case("integer-uint8", (Integer[Tensor, "n"],), (t(3, dtype=torch.uint8),)),
    Case("uint8-int8", (UInt8[Tensor, "n"],), (t(3, dtype=torch.int8),), expect_pass=False),
    Case("bool-ok", (Bool[Tensor, "n"],), (t(3, dtype=torch.bool),)),
    Case("bool-bad", (Bool[Tensor, "n"],), (t(3, dtype=torch.uint8),), expect_pass=False),
    Case("shaped-any", (Shaped[Tensor, "n"],), (t(3, dtype=torch.complex64),)),
    Case("bf16-ok", (BFloat16[Tensor, "n"],), (t(3, dtype=torch.bfloat16),)),
    Case("bf16-f16", (BFloat16[Tensor, "n"],), (t(3, dtype=torch.float16),), expect_pass=False),
    Case("f16-ok", (Float16[Tensor, "n"],), (t(3, dtype=torch.float16),)),
    Case("f32-f64", (Float32[Tensor, "n"],), (t(3, dtype=torch.float64),), expect_pass=False),
    Case("f64-ok", (Float64[Tensor, "n"],), (t(3, dtype=torch.float64),)),
    Case("int64-int32", (Int64[Tensor, "n"],), (t(3, dtype=torch.int32),), expect_pass=False),
    Case("real-bool", (Real[Tensor, "n"],), (t(3, dtype=torch.bool),), expect_pass=False),
    Case("num-complex", (Num[Tensor, "n"],), (t(3, dtype=torch.complex64),)),
    Case("complex64-f32", (Complex64[Tensor, "n"],), (t(3),), expect_pass=False),
    Case(
        "dtype-return-bad", (F,), (t(3),), returns=Int[Tensor, "n"], result=(3,), expect_pass=False
    ),
    Case(
        "dtype-return-ok",
        (F,),
        (t(3),),
        returns=Int[Tensor, "n"],
        result=(3,),
        result_dtype=torch.int64,
    ),
    # not a tensor, optional tensors, non-tensor hints
    Case("list-for-tensor", (F,), ([1.0, 2.0],), expect_pass=False),
    Case("optional-none", (F, F | None), (t(3), None)),
    Case("optional-bad", (F, F | None), (t(3), t(4)), expect_pass=False),
    Case("int-ok", (F, int), (t(3), 2)),
    Case("int-str", (F, int), (t(3), "2"), expect_pass=False),
    Case("int-bool", (int,), (True,)),
    Case("float-int-no-tower", (float,), (2,), expect_pass=False),
    Case("str-none-ok", (str | None,), (None,)),
    Case("str-none-bad", (str | None,), (3,), expect_pass=False),
    Case("list-int-ok", (list[int],), ([1, 2],)),
    Case("list-int-bad", (list[int],), (["x"],), expect_pass=False),
    Case("tuple-int-str-bad", (tuple[int, str],), ((1, 2),), expect_pass=False),
    Case("dict-str-int-ok", (dict[str, int],), ({"a": 1},)),
    # a single-element container of tensors (the oracle samples one element)
    Case("list-tensor-ok", (list[Float[Tensor, "n d"]], F), ([t(2, 3)], t(2))),
    Case("list-tensor-bad", (list[Float[Tensor, "n d"]], F), ([t(2, 3)], t(3)), expect_pass=False),
    Case(
        "tuple-tensor-bad",
        (tuple[Float[Tensor, " n"], Int[Tensor, " n"]],),
        ((t(3), t(3)),),
        expect_pass=False,
    ),
]


def _function(case: Case) -> Callable[..., Any]:
    def fn(a: Any = None, b: Any = None, c: Any = None) -> Any:
        if isinstance(case.result, tuple):
            return torch.zeros(case.result, dtype=case.result_dtype)
        return case.result

    annotations: dict[str, Any] = dict(zip(_PARAMETERS, case.hints, strict=False))
    if case.returns is not None:
        annotations["return"] = case.returns
    fn.__annotations__ = annotations
    return fn


def _verdict(checked: Callable[..., Any], args: tuple[Any, ...]) -> bool:
    try:
        checked(*args)
    except (TypeCheckError, BeartypeCallHintViolation):
        return False
    return True


def test_the_table_is_large_and_balanced() -> None:
    assert len(CASES) >= 40
    assert len({case.id for case in CASES}) == len(CASES)
    failing = sum(not case.expect_pass for case in CASES)
    assert 20 <= failing <= len(CASES) - 20


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_same_verdict_as_jaxtyped_beartype(case: Case) -> None:
    oracle = _verdict(jaxtyped(typechecker=beartype)(_function(case)), case.args)
    assert oracle == case.expect_pass, "the table's expectation disagrees with the oracle"
    ours = typed_flops(_function(case))
    if case.expect_pass:
        ours(*case.args)
    else:
        with pytest.raises(ContractError):
            ours(*case.args)
