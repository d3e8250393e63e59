"""The compiled contract: the jaxtyping grammar, dtypes, devices, non-tensor hints, and a
Hypothesis property over random sizes (containers: test_contract_containers.py)."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from filled import ones
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import BFloat16, Bool, Float, Float16, Float32, Int, Shaped
from torch import Tensor

from typedflops import (
    ContractError,
    DeviceError,
    DtypeError,
    ShapeError,
    SpecError,
    TypedFunction,
    typed_flops,
)
from typedflops.contract.annotation import AxisKind, tensor_spec
from typedflops.contract.compiled import compile_contract
from typedflops.contract.scope import CallState

Linear = TypedFunction[[Tensor, Tensor], Tensor]


# -- parsing annotations -------------------------------------------------------------------


def test_tensor_spec_axes() -> None:
    spec = tensor_spec(Float[Tensor, "3 rows=4 n #m _ _k *batch h*dh"])
    kinds = [axis.kind for axis in spec.axes]
    assert kinds == [
        AxisKind.FIXED,
        AxisKind.FIXED,
        AxisKind.NAMED,
        AxisKind.NAMED,
        AxisKind.ANONYMOUS,
        AxisKind.ANONYMOUS,
        AxisKind.VARIADIC,
        AxisKind.SYMBOLIC,
    ]
    assert [axis.size for axis in spec.axes[:2]] == [3, 4]
    assert spec.axes[3].broadcastable
    assert spec.variadic_index == 6
    assert spec.names == ("n", "m", "batch", "dh", "h")
    assert spec.label == 'Float[Tensor, "3 rows=4 n #m _ _k *batch h*dh"]'


def test_tensor_spec_is_cached() -> None:
    hint = Float[Tensor, "a b"]
    assert tensor_spec(hint) is tensor_spec(hint)


@pytest.mark.parametrize(
    ("hint", "allowed", "refused"),
    [
        (
            Float[Tensor, "n"],
            [torch.float32, torch.float64, torch.float16, torch.bfloat16],
            [torch.int64, torch.bool, torch.complex64],
        ),
        (Int[Tensor, "n"], [torch.int8, torch.int32, torch.int64], [torch.uint8, torch.float32]),
        (Bool[Tensor, "n"], [torch.bool], [torch.uint8, torch.int64]),
        (BFloat16[Tensor, "n"], [torch.bfloat16], [torch.float16, torch.float32]),
        (Float16[Tensor, "n"], [torch.float16], [torch.bfloat16]),
        (Float32[Tensor, "n"], [torch.float32], [torch.float64]),
    ],
)
def test_dtype_classes(hint: Any, allowed: list[torch.dtype], refused: list[torch.dtype]) -> None:
    spec = tensor_spec(hint)
    assert spec.dtypes is not None
    assert set(allowed) <= spec.dtypes
    assert not set(refused) & spec.dtypes

    def body(x: Any) -> None:
        pass

    body.__annotations__ = {"x": hint, "return": None}
    f = typed_flops(body)
    for dtype in allowed:
        f(ones(2, dtype=dtype))
    for dtype in refused:
        with pytest.raises(DtypeError, match=re.escape(f"has dtype {str(dtype)[6:]} but")):
            f(ones(2, dtype=dtype))


def test_shaped_allows_any_dtype() -> None:
    assert tensor_spec(Shaped[Tensor, "n"]).dtypes is None

    @typed_flops
    def f(x: Shaped[Tensor, " n"]) -> None:
        pass

    for dtype in (torch.bool, torch.uint8, torch.complex128, torch.float8_e4m3fn):
        f(torch.zeros(2, dtype=dtype))


def test_other_array_types_are_checked_by_jaxtyping_with_the_calls_dims() -> None:
    @typed_flops
    def f(x: Float[np.ndarray, " n"], t: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return t

    f(np.ones(3), torch.ones(3))
    with pytest.raises(ShapeError) as info:
        f(np.ones(3), torch.ones(4))  # n bound by the array, broken by the tensor
    assert str(info.value).splitlines()[1:] == [
        "  n=3 was bound by argument 'x' (Float[ndarray, \"n\"])",
        "  bound so far: n=3",
    ]

    @typed_flops
    def g(t: Float[Tensor, " n"], x: Float[np.ndarray, " n"]) -> None:
        pass

    with pytest.raises(ShapeError, match=re.escape("the size of dimension n is 2 which")):
        g(torch.ones(3), np.ones(2))  # n bound by the tensor, broken by the array
    with pytest.raises(DtypeError, match=re.escape("has dtype int64 but its annotation")):
        f(np.arange(3), torch.ones(3))
    with pytest.raises(ContractError, match=re.escape("is a Tensor but its annotation")):
        f(torch.ones(3), torch.ones(3))  # type: ignore[arg-type]


def test_an_iterator_hint_checks_the_type_and_never_consumes() -> None:
    @typed_flops
    def f(x: Iterator[Float[Tensor, " n"]]) -> int:
        return len(list(x))

    assert f(iter([torch.ones(2), torch.ones(3)])) == 2  # elements cannot be checked
    with pytest.raises(ContractError, match=re.escape("argument 'x' is a list but its hint")):
        f([torch.ones(2)])  # type: ignore[arg-type]


def test_symbolic_axis_of_a_variadic_dim_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=re.escape("b is a variadic dim (*b)")):

        @typed_flops
        def f(x: Float[Tensor, "*b"]) -> Float[Tensor, " b+1"]:
            return x


def test_symbolic_argument_axis_with_unbound_name() -> None:
    with pytest.raises(SpecError, match=re.escape("parameter 'y' annotation \"k*2\" uses k")):

        @typed_flops
        def f(x: Float[Tensor, " n"], y: Float[Tensor, " k*2"]) -> None:
            pass


# -- the grammar, at runtime -----------------------------------------------------------------


def test_named_and_fixed(linear: Linear) -> None:
    assert linear(ones(2, 3), ones(3, 4)).shape == (2, 4)

    @typed_flops
    def f(x: Float[Tensor, "rows=3 n"], y: Float[Tensor, "n 2"]) -> None:
        pass

    f(ones(3, 5), ones(5, 2))
    with pytest.raises(ShapeError, match=re.escape("needs size 3 at axis 0")):
        f(ones(2, 5), ones(5, 2))
    with pytest.raises(ShapeError, match=re.escape("needs size 2 at axis 1")):
        f(ones(3, 5), ones(5, 3))


def test_anonymous_dims_bind_nothing() -> None:
    @typed_flops
    def f(x: Float[Tensor, "_ n"], y: Float[Tensor, "_skip n"]) -> Float[Tensor, " _"]:
        return torch.ones(11)

    f(ones(2, 3), ones(7, 3))
    with pytest.raises(ShapeError, match=re.escape("needs n=3")):
        f(ones(2, 3), ones(2, 4))


def test_broadcastable_dim() -> None:
    @typed_flops
    def f(x: Float[Tensor, "#n m"], y: Float[Tensor, "n m"]) -> None:
        pass

    f(ones(1, 3), ones(5, 3))
    f(ones(5, 3), ones(5, 3))
    with pytest.raises(ShapeError, match=re.escape("needs n=2")):
        f(ones(2, 3), ones(5, 3))


def test_named_variadic() -> None:
    @typed_flops
    def f(x: Float[Tensor, "*batch d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "*batch k"]:
        return x @ w

    assert f(ones(4), ones(4, 2)).shape == (2,)
    assert f(ones(2, 3, 5, 4), ones(4, 2)).shape == (2, 3, 5, 2)
    with pytest.raises(ShapeError, match=re.escape("needs at least 1 dimensions")):
        f(ones(), ones(4, 2))


def test_broadcastable_variadic_follows_jaxtyping() -> None:
    @typed_flops
    def f(x: Float[Tensor, "#*b n"], y: Float[Tensor, "*b n"]) -> None:
        pass

    f(ones(1, 3, 4), ones(2, 3, 4))
    with pytest.raises(ShapeError, match=re.escape("needs *b=(2, 3)")):
        f(ones(2, 3, 4), ones(1, 3, 4))


def test_ellipsis() -> None:
    @typed_flops
    def f(x: Float[Tensor, "... n"], y: Float[Tensor, "... n"]) -> Float[Tensor, "..."]:
        return x.sum(-1)

    f(ones(2, 3), ones(5, 6, 3))
    with pytest.raises(ShapeError, match=re.escape("needs n=3")):
        f(ones(2, 3), ones(2, 4))


@pytest.mark.parametrize(
    ("dim_str", "in_shape", "good", "bad"),
    [
        ("n+1", (3,), (4,), (3,)),
        ("n-1", (3,), (2,), (3,)),
        ("2*n", (3,), (6,), (5,)),
        ("n//2", (7,), (3,), (4,)),
        ("h*dh", (2, 3), (6,), (5,)),
        ("h dh h*dh", (2, 3), (2, 3, 6), (2, 3, 5)),
    ],
)
def test_symbolic_return(
    dim_str: str, in_shape: tuple[int, ...], good: tuple[int, ...], bad: tuple[int, ...]
) -> None:
    names = " ".join(("n",) if len(in_shape) == 1 else ("h", "dh"))
    result: list[Tensor] = []

    def body(x: Any) -> Tensor:
        return result[0]

    body.__annotations__ = {"x": Float[Tensor, names], "return": Float[Tensor, dim_str]}
    f = typed_flops(body)
    result.append(torch.ones(good))
    f(torch.ones(in_shape))
    result[0] = torch.ones(bad)
    with pytest.raises(ShapeError) as info:
        f(torch.ones(in_shape))
    assert info.value.argument == "return"
    assert info.value.actual == bad[-1]


def test_symbolic_argument_waits_for_later_arguments() -> None:
    @typed_flops
    def f(x: Float[Tensor, " n+1"], y: Float[Tensor, " n"]) -> None:
        pass

    f(ones(4), ones(3))
    with pytest.raises(ShapeError, match=re.escape("needs n+1=4 at axis 0")):
        f(ones(3), ones(3))


# -- devices ---------------------------------------------------------------------------------


def test_one_device_per_call(linear: Linear) -> None:
    meta = linear(ones(2, 3, device="meta"), ones(3, 4, device="meta"))
    assert meta.device.type == "meta" and meta.shape == (2, 4)
    with pytest.raises(DeviceError, match=re.escape("argument 'w' is on meta but argument 'x'")):
        linear(ones(2, 3), ones(3, 4, device="meta"))


def test_device_of_a_container_element() -> None:
    @typed_flops
    def f(xs: list[Float[Tensor, " n"]]) -> None:
        pass

    with pytest.raises(DeviceError, match=re.escape("argument 'xs[2]' is on meta")):
        f([ones(2), ones(2), ones(2, device="meta")])


# -- non-tensor hints, *args, **kwargs, defaults ------------------------------------------------


@pytest.mark.parametrize(
    ("hint", "good", "bad"),
    [
        (int, 3, "3"),
        (str | None, None, 3),
        (list[int], [1, 2], ["x"]),
        (dict[str, float], {"a": 1.0}, {"a": "b"}),
        (tuple[int, str], (1, "a"), (1, 2)),
        (typing.Literal["mean", "sum"], "sum", "meen"),
    ],
)
def test_non_tensor_hints(hint: Any, good: Any, bad: Any) -> None:
    def body(x: Any, k: Any) -> None:
        pass

    body.__annotations__ = {"x": Float[Tensor, "n"], "k": hint, "return": None}
    f = typed_flops(body)
    f(ones(2), good)
    with pytest.raises(ContractError) as info:
        f(ones(2), bad)
    assert type(info.value) is ContractError
    # (each element of a container is checked and named: `k[0]`, `k['a']`)
    assert str(info.value).startswith("body(): argument 'k")
    assert " violates its hint " in str(info.value)


def test_none_return_is_enforced() -> None:
    @typed_flops
    def f(x: Float[Tensor, " n"]) -> None:
        return x  # type: ignore[return-value]

    with pytest.raises(ContractError, match=re.escape("the return value violates its hint")):
        f(ones(2))


def test_var_args_and_kwargs() -> None:
    @typed_flops
    def f(
        x: Float[Tensor, " n"],
        *rest: Float[Tensor, " n"],
        scale: int = 1,
        **named: Float[Tensor, " n"],
    ) -> None:
        pass

    f(ones(3), ones(3), ones(3), scale=2, extra=ones(3))
    with pytest.raises(ShapeError, match=re.escape("argument 'rest[1]' has shape (4,)")):
        f(ones(3), ones(3), ones(4))
    with pytest.raises(ShapeError, match=re.escape("argument 'extra' has shape (4,)")):
        f(ones(3), extra=ones(4))
    with pytest.raises(ContractError, match=re.escape("argument 'scale' violates its hint int")):
        f(ones(3), scale="2")  # type: ignore[arg-type]


def test_keyword_arguments_are_checked(linear: Linear) -> None:
    with pytest.raises(ShapeError, match=re.escape("argument 'w' has shape (4, 5)")):
        linear(w=ones(4, 5), x=ones(2, 3))  # type: ignore[call-arg]


_FIVE = torch.ones(5)


def test_defaults_are_not_the_callers_to_check() -> None:
    @typed_flops
    def f(x: Float[Tensor, " n"], y: Float[Tensor, " n"] = _FIVE) -> None:
        pass

    f(ones(3))
    with pytest.raises(ShapeError):
        f(ones(3), ones(5))


def test_unannotated_and_any_are_not_checked() -> None:
    @typed_flops
    def f(x: Float[Tensor, " n"], y, z: Any) -> Any:  # type: ignore[no-untyped-def]
        return "anything"

    assert f(ones(3), object(), "z") == "anything"


class Node:
    """A class whose method refers to the class itself (resolved at the first call)."""

    @typed_flops
    def link(self, other: Node, x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return x


def test_forward_reference_to_the_enclosing_class() -> None:
    assert Node().link(Node(), ones(2)).shape == (2,)
    with pytest.raises(ContractError, match=re.escape("argument 'other' violates its hint")):
        Node().link(1, ones(2))


def test_still_undefined_forward_reference_is_a_spec_error() -> None:
    @typed_flops
    def f(x: Undefined) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(SpecError, match=re.escape("cannot resolve its type hints")):
        f(1)


# -- the contract object itself ----------------------------------------------------------------


def test_compile_contract_and_call_state() -> None:
    def linear(
        x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
    ) -> Float[Tensor, "batch d_out"]:
        return x @ w

    contract = compile_contract(linear)
    assert contract.function == "linear"
    assert contract.dim_names() == {"batch", "d_in", "d_out"}
    state = CallState("linear")
    contract.check_arguments((ones(8, 4), ones(4, 3)), {}, state)
    assert state.sizes == {"batch": 8, "d_in": 4, "d_out": 3}
    assert state.device == torch.device("cpu")
    assert state.origin_line("d_in") == "d_in=4 was bound by argument 'x' (shape (8, 4), axis 1)"
    assert state.bound_so_far() == "batch=8, d_in=4, d_out=3"
    contract.check_return(ones(8, 3), state)
    with pytest.raises(ShapeError, match=re.escape("needs d_out=3")):
        contract.check_return(ones(8, 2), state)


def test_bound_before_the_arguments() -> None:
    def forward(x: Float[Tensor, "b d_in"]) -> None:
        pass

    contract = compile_contract(forward)
    state = CallState("Linear.forward")
    state.bind("d_in", 4, "module Linear")
    with pytest.raises(ShapeError) as info:
        contract.check_arguments((ones(2, 5),), {}, state)
    assert str(info.value).splitlines()[1] == "  d_in=4 was bound by module Linear"


def test_checks_run_on_fake_tensors_and_under_inference_mode(linear: Linear) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w = torch.empty(2, 3), torch.empty(3, 4)
        assert linear(x, w).shape == (2, 4)
        with pytest.raises(ShapeError):
            linear(x, torch.empty(4, 4))
    with torch.inference_mode():
        assert linear(ones(2, 3), ones(3, 4)).shape == (2, 4)
    with torch.no_grad():
        assert linear(ones(2, 3), torch.nn.Parameter(ones(3, 4))).shape == (2, 4)


# -- a property over random sizes ----------------------------------------------------------------

_size = st.integers(min_value=1, max_value=12)


@typed_flops
def _linear(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    return x @ w


@settings(max_examples=60, deadline=None)
@given(
    batch=_size,
    d_in=_size,
    d_out=_size,
    delta=st.integers(min_value=1, max_value=5),
    which=st.sampled_from(["x.batch", "x.d_in", "w.d_in", "w.d_out"]),
)
def test_random_sizes(batch: int, d_in: int, d_out: int, delta: int, which: str) -> None:
    x_shape, w_shape = [batch, d_in], [d_in, d_out]
    assert _linear(torch.ones(x_shape), torch.ones(w_shape)).shape == (batch, d_out)
    # Perturb one size: only a dim that another argument also binds can be caught.
    tensor, dim = which.split(".")
    shape = x_shape if tensor == "x" else w_shape
    axis = {"batch": 0, "d_in": 1 if tensor == "x" else 0, "d_out": 1}[dim]
    shape[axis] += delta
    if dim in ("batch", "d_out"):
        # bound once: the call is still valid, and the result follows the new size
        out = _linear(torch.ones(x_shape), torch.ones(w_shape))
        assert out.shape == (x_shape[0], w_shape[1])
        return
    with pytest.raises(ShapeError) as info:
        _linear(torch.ones(x_shape), torch.ones(w_shape))
    assert info.value.dim == "d_in"
    assert info.value.argument == "w"
    assert info.value.expected == x_shape[1]
    assert info.value.actual == w_shape[0]


@settings(max_examples=40, deadline=None)
@given(
    batch=_size,
    d_in=_size,
    d_out=_size,
    delta=st.integers(min_value=1, max_value=5),
    which=st.sampled_from(["batch", "d_out"]),
)
def test_random_sizes_of_the_return(
    batch: int, d_in: int, d_out: int, delta: int, which: str
) -> None:
    sizes = {"batch": batch, "d_out": d_out}
    sizes[which] += delta

    @typed_flops
    def wrong(
        x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
    ) -> Float[Tensor, "batch d_out"]:
        return torch.ones(sizes["batch"], sizes["d_out"])

    with pytest.raises(ShapeError) as info:
        wrong(torch.ones(batch, d_in), torch.ones(d_in, d_out))
    assert info.value.dim == which
    assert info.value.argument == "return"
    assert info.value.expected == (batch if which == "batch" else d_out)
