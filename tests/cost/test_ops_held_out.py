"""Ops counted by the conventions' rules where a first reading would count them otherwise:
matrix products of integer values (counted as FlopCounterMode counts them, as their
floating-point twins), the complex outer-product update ``addr`` (a complex multiply 6, an
add 2 per output element).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from jaxtyping import Float, Int
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from typedflops import estimate, record
from typedflops.errors import DryRunError


def _ints(*shape: int) -> Tensor:
    return torch.randint(0, 5, shape)


INTEGER_PRODUCTS: list[tuple[str, Callable[[Callable[..., Tensor]], Tensor]]] = [
    ("mm", lambda make: make(4, 3) @ make(3, 5)),
    ("bmm", lambda make: torch.bmm(make(2, 4, 3), make(2, 3, 5))),
    ("mv", lambda make: make(4, 3) @ make(3)),
    ("dot", lambda make: make(3) @ make(3)),
    ("addmm", lambda make: torch.addmm(make(4, 5), make(4, 3), make(3, 5))),
    ("addbmm", lambda make: torch.addbmm(make(4, 5), make(2, 4, 3), make(2, 3, 5))),
    ("baddbmm", lambda make: torch.baddbmm(make(2, 4, 5), make(2, 4, 3), make(2, 3, 5))),
    ("addmv", lambda make: torch.addmv(make(4), make(4, 3), make(3))),
    ("addr", lambda make: torch.addr(make(4, 5), make(4), make(5))),
    ("einsum", lambda make: torch.einsum("ij,jk->ik", make(4, 3), make(3, 5))),
]


@pytest.mark.parametrize(
    "body", [case[1] for case in INTEGER_PRODUCTS], ids=[case[0] for case in INTEGER_PRODUCTS]
)
def test_a_product_of_integer_values_counts_as_its_floating_point_twin(
    body: Callable[[Callable[..., Tensor]], Tensor],
) -> None:
    # a multiply and an add per term, as FlopCounterMode counts it where it has a formula
    # (mm of 4 x 3 by 3 x 5: 120), the operations an int8 kernel's peak is given in
    with FlopCounterMode(display=False) as counter:
        body(_ints)
    with record() as ints:
        body(_ints)
    with record() as floats:
        body(lambda *shape: torch.randn(*shape))
    assert ints.total.flops == floats.total.flops > 0
    assert ints.total.matmul_flops == floats.total.matmul_flops
    assert ints.total.uncounted == ()
    if counter.get_total_flops():
        assert ints.total.matmul_flops == counter.get_total_flops()


def test_an_estimate_of_an_integer_product_counts_it() -> None:
    cost = estimate(torch.matmul, Int[Tensor, "m k"], Int[Tensor, "k n"], m=4, k=3, n=5)
    assert (cost.flops, cost.matmul_flops, cost.exact) == (120, 120, True)


def test_a_floating_point_product_of_integer_inputs_made_float_is_counted() -> None:
    # masks made float before the product compute at float32: 2·4·3·5, FlopCounterMode's
    a = (_ints(4, 3) > 2).float()
    b = (_ints(3, 5) > 2).float()
    with record() as rec:
        a @ b
    assert rec.total.flops == rec.total.matmul_flops == 2 * 4 * 3 * 5


def test_a_complex_outer_product_update_counts_complex_multiplies_and_adds() -> None:
    # addr(c, x, y) = c + x yᵀ: 4 x 5 outputs, each a complex multiply (6) and add (2);
    # recorded 40 (2 a value, as for real values) where 160 ran
    def addr(dtype: torch.dtype) -> int:
        c = torch.randn(4, 5, dtype=dtype)
        x, y = torch.randn(4, dtype=dtype), torch.randn(5, dtype=dtype)
        with record() as rec:
            torch.addr(c, x, y)
        return rec.total.flops

    assert addr(torch.complex64) == (6 + 2) * 4 * 5
    assert addr(torch.float32) == (1 + 1) * 4 * 5
    # its parts, run alone: an outer product's multiplies (6 a value) and an add (2)
    z = torch.randn(4, dtype=torch.complex64)
    w = torch.randn(5, dtype=torch.complex64)
    with record() as parts:
        torch.outer(z, w) + torch.randn(4, 5, dtype=torch.complex64)
    assert parts.total.flops == (6 + 2) * 4 * 5


# (validation asked for by each body: torch.compile turns the default off for the process)
def _normal_sample(x: Tensor) -> Tensor:
    return torch.distributions.Normal(x, x.abs() + 1, validate_args=True).rsample()


def _categorical_sample(x: Tensor) -> Tensor:
    sample: Tensor = torch.distributions.Categorical(logits=x, validate_args=True).sample()  # type: ignore[no-untyped-call]
    return sample


def _normal_log_prob(x: Tensor) -> Tensor:
    density: Tensor = torch.distributions.Normal(0.0, 1.0, validate_args=True).log_prob(x)  # type: ignore[no-untyped-call]
    return density


def _bernoulli_log_prob(x: Tensor) -> Tensor:
    bernoulli = torch.distributions.Bernoulli(logits=x, validate_args=True)
    density: Tensor = bernoulli.log_prob((x > 0).float())  # type: ignore[no-untyped-call]
    return density


def _checked_double(x: Tensor) -> Tensor:
    torch._check_tensor_all(x == x)  # type: ignore[no-untyped-call]
    return x * 2


DISTRIBUTION_BODIES: list[tuple[str, Callable[[Tensor], Tensor]]] = [
    ("normal-rsample", _normal_sample),
    ("categorical-sample", _categorical_sample),
    ("normal-log-prob", _normal_log_prob),
    ("bernoulli-log-prob", _bernoulli_log_prob),
    ("check-tensor-all", _checked_double),
]


@pytest.mark.parametrize(
    "body", [case[1] for case in DISTRIBUTION_BODIES], ids=[case[0] for case in DISTRIBUTION_BODIES]
)
def test_a_validated_distribution_is_estimated_as_a_real_run_counts_it(
    body: Callable[[Tensor], Tensor],
) -> None:
    # torch.distributions validates its parameters and a log_prob's value by reading a
    # value (`if not torch._is_all_true(constraint.check(value)): raise`); a dry run
    # stopped there, where the check passes and the count is the real run's
    cost = estimate(body, Float[Tensor, "n d"], n=4, d=3)
    x = torch.randn(4, 3)
    with record() as rec:
        body(x)
    assert (cost.flops, cost.uncounted) == (rec.total.flops, ())
    assert cost.flops > 0
    with record() as larger:
        body(torch.randn(6, 5))
    assert cost.forward.at({"n": 6, "d": 5}) == larger.total.flops


def test_a_normal_samples_count_by_hand() -> None:
    # loc checked real (x == x: 12 compares), scale checked positive (12), x.abs() + 1
    # (24), the sample loc + eps * scale (24): 72, forward; backward with x requiring grad:
    # the sample's gradient into scale (eps · g, 12) and loc (g, free), abs' (sign, then
    # times g: 24), the sum of x's two gradients (12): 48; the sum's backward is an expand
    body = DISTRIBUTION_BODIES[0][1]
    cost = estimate(body, Float[Tensor, "n d"], n=4, d=3, grad=("x",))
    assert cost.flops == 72
    x = torch.randn(4, 3, requires_grad=True)
    with record() as rec:
        body(x).sum().backward()
    assert cost.backward_flops == rec.total.backward_flops == 12 + 24 + 12


def _rows_by_lengths(x: Tensor) -> Tensor:
    # a mask of ones' lengths read out as Python numbers (what unpadding code does)
    lengths = torch.ones_like(x, dtype=torch.long).sum(-1).tolist()
    return torch.cat([x[:, :length].sum(-1) for length in lengths])


def _rows_by_positions(x: Tensor) -> Tensor:
    return torch.cat([x[i : i + 1] * 2 for i in torch.arange(x.shape[0]).tolist()])


@pytest.mark.parametrize(
    ("body", "formula"),
    [(_rows_by_lengths, "d*n**2"), (_rows_by_positions, "d*n")],
    ids=["lengths", "positions"],
)
def test_tolist_of_values_the_shapes_fix_is_read_in_a_dry_run(
    body: Callable[[Tensor], Tensor], formula: str
) -> None:
    # .tolist() of a tensor whose values the shapes fix (a mask of ones' lengths, arange
    # positions) stopped a dry run as a value read; a real run reads them: n loops of
    # n·d adds (n = 4, d = 3: 48), and n rows doubled (12)
    cost = estimate(body, Float[Tensor, "n d"], n=4, d=3)
    with record() as rec:
        body(torch.randn(4, 3))
    assert (cost.flops, str(cost.formula), cost.exact) == (rec.total.flops, formula, True)
    with record() as larger:
        body(torch.randn(5, 2))
    assert cost.forward.at({"n": 5, "d": 2}) == larger.total.flops


def test_tolist_of_an_input_still_stops_a_dry_run_in_one_line() -> None:
    with pytest.raises(DryRunError, match=r"a dry run cannot go past .* at test_ops_held_out\.py"):
        estimate(lambda x: x * len(x.tolist()), Float[Tensor, "n d"], n=4, d=3)
