"""``typedflops.testing``: the assertions pass on right claims and explain wrong ones."""

from __future__ import annotations

import functools

import pytest
import sympy
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import TypedFunction, typed_flops
from typedflops.config import disabled
from typedflops.errors import ContractError, DtypeError, ShapeError, SpecError
from typedflops.nn import TwoLayerMLP
from typedflops.testing import (
    FlopComparison,
    assert_contract_error,
    assert_flops,
    assert_matches_flop_counter,
)

#: The ``linear`` fixture (tests/conftest.py): the SPEC's example.
LinearFunction = TypedFunction[..., Tensor]


@typed_flops
def two_layer(
    x: Float[Tensor, "batch d_in"],
    w1: Float[Tensor, "d_in d_hidden"],
    w2: Float[Tensor, "d_hidden d_out"],
) -> Float[Tensor, "batch d_out"]:
    return (x @ w1) @ w2


@typed_flops
def elementwise_einsum(x: Float[Tensor, " n"], y: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
    return torch.einsum("i,i->i", x, y)


def plain_linear(x: Tensor, w: Tensor) -> Tensor:
    return x @ w


# -- assert_flops ------------------------------------------------------------------------


def test_assert_flops_symbolic(linear: LinearFunction) -> None:
    assert assert_flops(linear, "2*d_out*batch*d_in") == sympy.sympify("2*batch*d_in*d_out")
    expected = 2 * sympy.Symbol("batch") * sympy.Symbol("d_in") * sympy.Symbol("d_out")
    assert_flops(linear, expected)


def test_assert_flops_at_dims() -> None:
    assert_flops(two_layer, "2*batch*d_hidden*(d_in + d_out)", batch=8, d_in=4, d_hidden=5, d_out=3)


def test_assert_flops_wrong_formula_message(linear: LinearFunction) -> None:
    with pytest.raises(AssertionError) as info:
        assert_flops(linear, "batch*d_in*d_out")
    assert str(info.value) == (
        "linear: forward FLOPs do not match\n"
        "  expected: batch*d_in*d_out\n"
        "  actual:   2*batch*d_in*d_out"
    )


def test_assert_flops_wrong_at_dims_message(linear: LinearFunction) -> None:
    with pytest.raises(AssertionError) as info:
        assert_flops(linear, "batch*d_in*d_out", batch=8, d_in=4, d_out=3)
    assert str(info.value) == (
        "linear: FLOPs do not match at batch=8, d_in=4, d_out=3\n"
        "  forward at these sizes: expected 96, actual 192\n"
        "  forward formula: expected batch*d_in*d_out, actual 2*batch*d_in*d_out"
    )


def test_assert_flops_names_a_dim_not_given(linear: LinearFunction) -> None:
    with pytest.raises(AssertionError, match="names heads, which no dim gives"):
        assert_flops(linear, "2*batch*d_in*d_out*heads", batch=8, d_in=4, d_out=3)


def test_assert_flops_backward(linear: LinearFunction) -> None:
    # x needs no grad: only the weights' gradients (and h's, to reach w1) are computed.
    assert_flops(
        two_layer,
        "2*batch*d_hidden*(d_in + d_out)",
        backward="2*batch*d_hidden*(d_in + 2*d_out)",
        grad=("w1", "w2"),
        batch=8,
        d_in=4,
        d_hidden=5,
        d_out=3,
    )
    with pytest.raises(AssertionError, match="backward at these sizes: expected 0, actual 240"):
        assert_flops(
            linear, "2*batch*d_in*d_out", backward="0", grad=("w",), batch=8, d_in=5, d_out=3
        )


def test_assert_flops_backward_needs_dims(linear: LinearFunction) -> None:
    with pytest.raises(TypeError, match="backward= needs the dims"):
        assert_flops(linear, "2*batch*d_in*d_out", backward="0")


def test_assert_flops_of_a_method_and_a_wrapper(linear: LinearFunction) -> None:
    model = TwoLayerMLP(4, 4, 3)
    assert_flops(model.forward, "2*batch*d_hidden*(d_in + d_out)", batch=8)
    assert_flops(model, "2*batch*d_hidden*(d_in + d_out)", batch=8)
    wrapped = torch.no_grad()(linear)
    assert_flops(wrapped, "2*batch*d_in*d_out", batch=2, d_in=3, d_out=4)


def test_assert_flops_needs_a_typed_function() -> None:
    with pytest.raises(AssertionError, match="plain_linear is not a @typed_flops function"):
        assert_flops(plain_linear, "2*m*n*k")


def test_assert_flops_never_evaluates_the_expected_text(linear: LinearFunction) -> None:
    with pytest.raises(SpecError, match="function calls such as"):
        assert_flops(linear, "__import__('os').getcwd()")


# -- assert_contract_error ---------------------------------------------------------------


def test_assert_contract_error_returns_the_error(linear: LinearFunction) -> None:
    error = assert_contract_error(
        linear, torch.ones(8, 784), torch.ones(600, 10), dim="d_in", error=ShapeError
    )
    assert isinstance(error, ShapeError)
    assert (error.function, error.argument, error.bindings) == (
        "linear",
        "w",
        {"batch": 8, "d_in": 784},
    )


def test_assert_contract_error_keyword_arguments(linear: LinearFunction) -> None:
    error = assert_contract_error(linear, x=torch.ones(2, 3), w=torch.ones(4, 5))
    assert error.dim == "d_in"


def test_assert_contract_error_wrong_dim(linear: LinearFunction) -> None:
    with pytest.raises(AssertionError) as info:
        assert_contract_error(linear, torch.ones(8, 4), torch.ones(5, 3), dim="batch")
    assert str(info.value).splitlines()[0] == (
        "linear() raised ShapeError at dim 'd_in', not 'batch':"
    )


def test_assert_contract_error_wrong_class(linear: LinearFunction) -> None:
    with pytest.raises(AssertionError, match="linear\\(\\) raised ShapeError, not DtypeError"):
        assert_contract_error(linear, torch.ones(8, 4), torch.ones(5, 3), error=DtypeError)


def test_assert_contract_error_no_error(linear: LinearFunction) -> None:
    with pytest.raises(AssertionError) as info:
        assert_contract_error(linear, torch.ones(8, 4), torch.ones(4, 3))
    assert str(info.value) == "linear() did not raise ContractError"


def test_assert_contract_error_says_when_checks_are_off(linear: LinearFunction) -> None:
    with disabled(), pytest.raises(AssertionError) as info:
        assert_contract_error(linear, torch.ones(8, 4), torch.ones(4, 3))
    assert str(info.value) == (
        "linear() did not raise ContractError "
        "(contract checks are off: TYPEDFLOPS_DISABLE=1 or typedflops.disabled())"
    )


def test_assert_contract_error_other_exception_of_an_unchecked_function() -> None:
    with pytest.raises(AssertionError) as info:
        assert_contract_error(plain_linear, torch.ones(8, 4), torch.ones(5, 3))
    message = str(info.value)
    assert message.startswith("plain_linear() raised RuntimeError, not ContractError: mat1")
    assert message.endswith(
        "(plain_linear is not a @typed_flops function; is the import hook installed?)"
    )
    assert isinstance(info.value.__cause__, RuntimeError)


def test_assert_contract_error_through_partial(linear: LinearFunction) -> None:
    bad_call = functools.partial(linear, w=torch.ones(5, 3))
    assert isinstance(assert_contract_error(bad_call, x=torch.ones(2, 4)), ContractError)


# -- assert_matches_flop_counter ---------------------------------------------------------


def test_matches_flop_counter_forward(linear: LinearFunction) -> None:
    compared = assert_matches_flop_counter(linear, torch.randn(8, 4), torch.randn(4, 3))
    assert isinstance(compared, FlopComparison)
    assert (compared.forward, compared.torch_forward) == (192, 192)
    assert (compared.backward, compared.torch_backward) == (None, None)
    assert compared.cost.flops == 192


def test_matches_flop_counter_backward_two_layer() -> None:
    batch, d, k = 16, 8, 4
    w1 = torch.randn(d, d, requires_grad=True)
    w2 = torch.randn(d, k, requires_grad=True)
    compared = assert_matches_flop_counter(
        two_layer, torch.randn(batch, d), w1, w2, loss=lambda out: out.sum()
    )
    # SPEC §3: backward 2*batch*d_in*(d_in + 2*d_out) with d_hidden = d_in
    assert compared.backward == compared.torch_backward == 2 * batch * d * (d + 2 * k)
    assert w1.grad is None and w2.grad is None  # gradients were taken, not accumulated


def test_matches_flop_counter_on_a_module() -> None:
    model = TwoLayerMLP(8, 8, 4)
    compared = assert_matches_flop_counter(model, torch.randn(16, 8), loss=torch.sum)
    assert compared.forward == 2 * 16 * 8 * (8 + 4)
    assert compared.backward == compared.torch_backward


def test_matches_flop_counter_on_an_elementwise_einsum() -> None:
    # An einsum that multiplies without summing runs a mul: no kernel FlopCounterMode counts.
    compared = assert_matches_flop_counter(elementwise_einsum, torch.ones(5), torch.ones(5))
    assert (compared.forward, compared.torch_forward) == (0, 0)
    assert compared.cost.flops == 5


def test_matches_flop_counter_reports_a_difference(linear: LinearFunction) -> None:
    # A loss with a matmul of its own: torch counts its backward too, typedflops does not.
    w = torch.ones(3, 4, requires_grad=True)
    with pytest.raises(AssertionError) as info:
        assert_matches_flop_counter(
            linear, torch.ones(2, 3), w, loss=lambda out: (out @ out.T).sum()
        )
    assert str(info.value).splitlines() == [
        "linear: typedflops and FlopCounterMode count different FLOPs",
        "  forward:  typedflops 48, FlopCounterMode 48",
        "  backward: typedflops 48, FlopCounterMode 112",
        "  typedflops counted: matmul 48",
    ]


def test_matches_flop_counter_loss_without_grad(linear: LinearFunction) -> None:
    with pytest.raises(SpecError, match="loss\\(output\\) does not require grad; make a "):
        assert_matches_flop_counter(linear, torch.ones(2, 3), torch.ones(3, 4), loss=torch.sum)


def test_matches_flop_counter_checks_the_contract_first(linear: LinearFunction) -> None:
    with pytest.raises(ShapeError):
        assert_matches_flop_counter(linear, torch.ones(2, 3), torch.ones(4, 4))


def test_typed_function_import_is_public(linear: LinearFunction) -> None:
    assert isinstance(linear, TypedFunction)
