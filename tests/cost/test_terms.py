"""Term (a count with its formula) and the Cost made of Terms: the SPEC's attribute names,
one exactness per term, and tables that mark every formula not checked at other sizes."""

from __future__ import annotations

import json

import sympy
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import Cost, Term, typed_flops

n, d = sympy.symbols("n d")


def test_a_term_holds_where_its_formula_gives_its_count() -> None:
    term = Term(24, 3 * n * d)
    assert term.holds_at({"n": 2, "d": 4})
    assert not term.holds_at({"n": 2, "d": 5})
    assert not term.holds_at({"n": 2})  # a symbol without a size: it holds nowhere
    assert term.at({"n": 10}) == 30 * d


def test_a_term_checked_where_it_is_false_keeps_only_its_count() -> None:
    wrong = Term(25, 3 * n * d)
    assert wrong.checked_at({"n": 2, "d": 4}) == Term(25, sympy.Integer(25), exact=False)
    right = Term(24, 3 * n * d)
    assert right.checked_at({"n": 2, "d": 4}) is right
    assert Term.of_count(7) == Term(7, sympy.Integer(7), exact=False)


def _cost(forward: Term, backward: Term, **terms: Term) -> Cost:
    return Cost(
        forward=forward,
        backward=backward,
        dims={"n": 2, "d": 4},
        bytes_read=64,
        bytes_written=32,
        function="f",
        **terms,  # type: ignore[arg-type]
    )


def test_cost_keeps_the_spec_names_of_each_count_and_formula() -> None:
    cost = _cost(
        Term(24, 3 * n * d),
        Term(48, 6 * n * d),
        matmul=Term(16, 2 * n * d),
        recompute=Term(8, n * d),
        activation=Term(32, 4 * n * d),
    )
    assert (cost.flops, cost.formula) == (24, 3 * n * d)
    assert (cost.backward_flops, cost.backward_formula) == (48, 6 * n * d)
    assert (cost.matmul_flops, cost.matmul_formula) == (16, 2 * n * d)
    assert (cost.recompute_flops, cost.recompute_formula) == (8, n * d)
    assert (cost.activation_bytes, cost.activation_formula) == (32, 4 * n * d)
    assert cost.intensity == 24 / 96
    assert cost.exact
    assert set(cost.terms) == {"forward", "backward", "matmul", "recompute", "activation"}
    data = json.loads(cost.to_json())
    assert data["formula"] == "3*d*n" and data["matmul_formula"] == "2*d*n"
    assert data["exact"] is True and data["inexact"] == [] and data["fixed"] == {}


def test_one_inexact_term_makes_the_cost_inexact_and_is_marked_in_its_table() -> None:
    cost = _cost(Term(24, 3 * n * d), Term(48, 6 * n * d, exact=False))
    assert not cost.exact
    assert cost.to_dict()["inexact"] == ["backward"]
    lines = str(cost).splitlines()
    forward = next(line for line in lines if line.lstrip().startswith("forward FLOPs"))
    backward = next(line for line in lines if line.lstrip().startswith("backward FLOPs"))
    assert forward.endswith(" 3*d*n") and "~" not in forward
    assert backward.endswith(" ~ 6*d*n")
    assert lines[-1] == "  ~ formulas hold at these sizes only (not checked at others)"


def test_sizes_held_fixed_are_listed_under_the_table() -> None:
    cost = Cost(
        forward=Term(24, 12 * n),
        backward=Term(0, sympy.Integer(0)),
        dims={"n": 2, "d": 4},
        bytes_read=0,
        bytes_written=0,
        fixed={"d": 4},
    )
    assert "  held fixed (numbers in the formulas): d=4" in str(cost).splitlines()
    assert cost.to_dict()["fixed"] == {"d": 4}


def test_an_estimate_gives_one_term_per_count_each_true_at_its_sizes() -> None:
    @typed_flops
    def layer(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
        return torch.relu(x @ w)

    cost = layer.estimate(n=4, d=8, k=6, grad=("w",))
    for name, term in cost.terms.items():
        assert isinstance(term, Term)
        assert term.holds_at(cost.dims), name
        assert term.exact, name
    for op in cost.ops:
        assert isinstance(op.forward, Term) and isinstance(op.backward, Term)
        assert (op.flops, op.formula) == (op.forward.count, op.forward.formula)


@typed_flops
def batched(
    a: Float[Tensor, "*batch m m"], b: Float[Tensor, "*batch m k"]
) -> Float[Tensor, "*batch m k"]:
    return a @ b + a.sum(-1, keepdim=True)


def test_a_variadic_dim_is_one_symbol_at_every_rank() -> None:
    # The same formula whether *batch is empty, one axis, or several (a product of sizes).
    batch, m, k = sympy.symbols("batch m k")
    expected = batch * m * (2 * m * k + m + k)
    for sizes, product in (((), 1), ((4,), 4), ((2, 3), 6), ((2, 1, 3), 6)):
        cost = batched.estimate(batch=sizes, m=5, k=3)
        assert cost.exact, sizes
        assert sympy.expand(cost.formula - expected) == 0, (sizes, cost.formula)
        assert cost.flops == product * 5 * (2 * 5 * 3 + 5 + 3)
