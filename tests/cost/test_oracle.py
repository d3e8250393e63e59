"""FLOP counts against torch's FlopCounterMode and hand formulas, forward and backward.

For each function: the symbolic formula evaluated at the sizes == the count typedflops
recorded == what FlopCounterMode counts when the same call runs (on meta and on real tensors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Cost, TypedFunction, einsum, rearrange, record, reduce, typed_flops
from typedflops.nn import Linear, TwoLayerMLP
from typedflops.testing import assert_matches_flop_counter

B, D, K = 1024, 256, 64


#: The ``linear`` fixture (tests/conftest.py): the SPEC's example.
LinearFunction = TypedFunction[[Tensor, Tensor], Tensor]


@typed_flops
def linear_einsum(
    x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    return einsum(x, w, "batch d_in, d_in d_out -> batch d_out")


@typed_flops
def two_layer(
    x: Float[Tensor, "batch d_in"],
    w1: Float[Tensor, "d_in d_hidden"],
    w2: Float[Tensor, "d_hidden d_out"],
) -> Float[Tensor, "batch d_out"]:
    return (x @ w1) @ w2


@typed_flops
def proj(h: Float[Tensor, "n d_in"], w: Float[Tensor, "d_in d_out"]) -> Float[Tensor, "n d_out"]:
    return einsum(h, w, "n d_in, d_in d_out -> n d_out")


@typed_flops
def block(
    x: Float[Tensor, "batch d"], w1: Float[Tensor, "d d"], w2: Float[Tensor, "d k"]
) -> Float[Tensor, "batch k"]:
    return proj(proj(x, w1), w2)


@typed_flops
def scores(
    q: Float[Tensor, "... seq_q d"], k: Float[Tensor, "... seq_k d"]
) -> Float[Tensor, "... seq_q seq_k"]:
    return einsum(q, k, "... seq_q d, ... seq_k d -> ... seq_q seq_k")


@typed_flops
def heads_attention(
    x: Float[Tensor, "batch seq d_model"], w: Float[Tensor, "d_model d_model"]
) -> Float[Tensor, "batch seq d_model"]:
    h = einsum(x, w, "batch seq d_in, d_in d_out -> batch seq d_out")
    q = rearrange(h, "batch seq (heads d_head) -> batch heads seq d_head", heads=4)
    s = einsum(q, q, "batch heads s1 d_head, batch heads s2 d_head -> batch heads s1 s2")
    o = einsum(s, q, "batch heads s1 s2, batch heads s2 d_head -> batch heads s1 d_head")
    return rearrange(o, "batch heads seq d_head -> batch seq (heads d_head)")


@typed_flops
def chain(
    a: Float[Tensor, "i j"], b: Float[Tensor, "j k"], c: Float[Tensor, "k l"]
) -> Float[Tensor, "i l"]:
    return einsum(a, b, c, "i j, j k, k l -> i l")


@typed_flops
def row_sums(x: Float[Tensor, "n m"]) -> Float[Tensor, " n"]:
    return reduce(x, "n m -> n", "sum")


@typed_flops
def row_means(x: Float[Tensor, "n m"]) -> Float[Tensor, " n"]:
    return reduce(x, "n m -> n", "mean")


@typed_flops
def attend(
    q: Float[Tensor, "b h s d"], k: Float[Tensor, "b h t d"], v: Float[Tensor, "b h t d"]
) -> Float[Tensor, "b h s d"]:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def flop_counter(fn: Callable[[], Tensor], backward: bool = False) -> int:
    """What FlopCounterMode counts for ``fn()`` (and its backward with a scalar loss)."""
    with FlopCounterMode(display=False) as counter:
        out = fn()
        if backward:
            out.pow(2).mean().backward()
    return int(counter.get_total_flops())


def forward_backward(cost: Cost) -> int:
    return cost.flops + cost.backward_flops


def at(formula: sympy.Expr, **dims: int) -> int:
    return int(formula.subs({sympy.Symbol(k): v for k, v in dims.items()}))


def test_linear_formula_count_and_oracle(linear: LinearFunction) -> None:
    b, d, k = sympy.symbols("batch d_in d_out")
    assert linear.formula == 2 * b * d * k
    cost = linear.estimate(batch=B, d_in=D, d_out=K)
    assert cost.flops == 33_554_432 == at(cost.formula, batch=B, d_in=D, d_out=K)
    x, w = torch.randn(B, D), torch.randn(D, K)
    assert flop_counter(lambda: linear(x, w)) == cost.flops
    assert linear_einsum.estimate(batch=B, d_in=D, d_out=K).flops == cost.flops


def test_two_layer_forward_and_backward_without_input_grad() -> None:
    cost = two_layer.estimate(batch=B, d_in=D, d_hidden=D, d_out=K, grad=("w1", "w2"))
    assert cost.flops == 167_772_160
    b, d_in, d_hidden, d_out = sympy.symbols("batch d_in d_hidden d_out")
    assert sympy.expand(cost.backward_formula - 2 * b * d_hidden * (d_in + 2 * d_out)) == 0
    assert forward_backward(cost) == 369_098_752
    x = torch.randn(B, D)
    w1 = torch.randn(D, D, requires_grad=True)
    w2 = torch.randn(D, K, requires_grad=True)
    assert flop_counter(lambda: two_layer(x, w1, w2), backward=True) == forward_backward(cost)


def test_two_layer_backward_with_input_grad_is_three_times_forward() -> None:
    cost = two_layer.estimate(batch=B, d_in=D, d_hidden=D, d_out=K, grad=("x", "w1", "w2"))
    assert forward_backward(cost) == 503_316_480 == 3 * cost.flops
    x = torch.randn(B, D, requires_grad=True)
    w1 = torch.randn(D, D, requires_grad=True)
    w2 = torch.randn(D, K, requires_grad=True)
    assert flop_counter(lambda: two_layer(x, w1, w2), backward=True) == forward_backward(cost)


def test_typed_mlp_matches_spec_formula_and_oracle() -> None:
    model = TwoLayerMLP(D, D, K)
    cost = model.estimate(batch=B)
    assert str(cost.formula) == "2*batch*d_hidden*(d_in + d_out)"
    assert forward_backward(cost) == 369_098_752
    x = torch.randn(B, D)
    assert flop_counter(lambda: model(x), backward=True) == forward_backward(cost)


def test_nested_calls_are_renamed_into_the_callers_names() -> None:
    cost = block.estimate(batch=8, d=16, k=4)
    batch, d, k = sympy.symbols("batch d k")
    assert sympy.expand(cost.formula - (2 * batch * d * d + 2 * batch * d * k)) == 0
    assert [op.path for op in cost.ops] == [("block", "proj"), ("block", "proj")]
    assert cost.flops == 2 * 8 * 16 * 16 + 2 * 8 * 16 * 4


def test_attention_scores_with_ellipsis() -> None:
    cost = scores.estimate(ellipsis=(2, 3), seq_q=5, seq_k=7, d=16)
    assert cost.flops == 2 * 6 * 5 * 7 * 16
    assert str(cost.formula) == "2*d*ellipsis*seq_k*seq_q"
    q, k = torch.randn(2, 3, 5, 16), torch.randn(2, 3, 7, 16)
    assert flop_counter(lambda: scores(q, k)) == cost.flops


def test_split_and_merge_heads_around_einsum() -> None:
    cost = heads_attention.estimate(batch=2, seq=6, d_model=16, grad=("w",))
    expected = 2 * 2 * 6 * 16 * 16 + 2 * (2 * 2 * 6 * 6 * 16)
    assert cost.flops == expected
    assert [op.op for op in cost.ops].count("rearrange") == 2
    assert all(op.flops == 0 for op in cost.ops if op.op == "rearrange")
    x = torch.randn(2, 6, 16)
    w = torch.randn(16, 16, requires_grad=True)
    # FlopCounterMode counts the products; autograd also sums the three gradients of `q`
    # (read as queries, keys and values): two adds of its 2 x 6 x 16 values
    sums = 2 * (2 * 6 * 16)
    assert flop_counter(lambda: heads_attention(x, w), backward=True) + sums == forward_backward(
        cost
    )


def test_attention_counts_the_kernel_that_runs() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    b, h, s, t, d = sympy.symbols("b h s t d")
    sizes: dict[str, Any] = {"b": 2, "h": 3, "s": 5, "t": 7, "d": 4}
    # On a CPU the fused flash kernel runs (FlopCounterMode counts it 0; we count it with
    # its formulas for the fused kernels): backward recomputes the scores, 2.5x forward.
    fused = attend.estimate(**sizes, grad=("q", "k", "v"))
    assert [op.op for op in fused.ops] == ["scaled_dot_product_attention"]
    assert sympy.expand(fused.formula - 4 * b * h * s * t * d) == 0
    assert sympy.expand(fused.backward_formula - 10 * b * h * s * t * d) == 0
    shapes = [(2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4)]
    assert fused.flops == sdpa_flop_count(*shapes)  # type: ignore[no-untyped-call]
    backward = sdpa_backward_flop_count((2, 3, 5, 4), *shapes)  # type: ignore[no-untyped-call]
    assert fused.backward_flops == backward
    with sdpa_kernel(SDPBackend.MATH):
        # The math kernel: its matmuls as FlopCounterMode counts them, forward and
        # backward, plus the scaling and the softmax it leaves at 0.
        math = attend.estimate(**sizes, grad=("q", "k", "v"))
        assert sympy.expand(math.formula - h * b * (4 * d * s * t + d * s + d * t + 5 * s * t)) == 0
        q, k, v = (torch.randn(2, 3, n, 4, requires_grad=True) for n in (5, 7, 7))
        compared = assert_matches_flop_counter(attend, q, k, v, loss=torch.sum)
        assert compared.forward == 4 * 2 * 3 * 5 * 7 * 4
        assert compared.backward == 2 * compared.forward


def test_three_operand_chain_counts_the_order_that_ran() -> None:
    cost = chain.estimate(i=1000, j=10, k=1000, l=10)
    assert cost.flops == 400_000
    a, b, c = torch.randn(1000, 10), torch.randn(10, 1000), torch.randn(1000, 10)
    assert flop_counter(lambda: chain(a, b, c)) == 400_000


def test_torch_linear_with_bias_matches_oracle() -> None:
    layer = torch.nn.Linear(D, K)
    x = torch.randn(B, D)
    with record() as rec:
        layer(x)
    matmuls = [op for op in rec.total.ops if op.op in ("linear", "addmm", "matmul", "mm")]
    assert sum(op.flops for op in matmuls) == 33_554_432 == flop_counter(lambda: layer(x))


def test_reductions_cost_one_op_per_input_element() -> None:
    assert row_sums.estimate(n=6, m=10).flops == 60
    assert row_means.estimate(n=6, m=10).flops == 60 + 6
    n, m = sympy.symbols("n m")
    assert row_sums.estimate(n=6, m=10).formula == n * m


def test_typed_linear_module_on_meta_and_real_agree() -> None:
    layer = Linear(D, K)
    meta_cost = layer.estimate(batch=B)
    x = torch.randn(B, D)
    with record() as rec:
        layer(x)
    assert rec.total.flops == meta_cost.flops == flop_counter(lambda: layer(x))


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 64),
    d_in=st.integers(1, 64),
    d_hidden=st.integers(1, 64),
    d_out=st.integers(1, 64),
    input_grad=st.booleans(),
)
def test_random_sizes_formula_count_and_oracle_agree(
    batch: int, d_in: int, d_hidden: int, d_out: int, input_grad: bool
) -> None:
    grad = ("x", "w1", "w2") if input_grad else ("w1", "w2")
    cost = two_layer.estimate(batch=batch, d_in=d_in, d_hidden=d_hidden, d_out=d_out, grad=grad)
    sizes = {"batch": batch, "d_in": d_in, "d_hidden": d_hidden, "d_out": d_out}
    assert at(cost.formula, **sizes) == cost.flops
    assert at(cost.backward_formula, **sizes) == cost.backward_flops
    x = torch.randn(batch, d_in, requires_grad=input_grad)
    w1 = torch.randn(d_in, d_hidden, requires_grad=True)
    w2 = torch.randn(d_hidden, d_out, requires_grad=True)
    assert flop_counter(lambda: two_layer(x, w1, w2), backward=True) == forward_backward(cost)


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_record_counts_what_ran_on_meta_and_real(device: str, linear: LinearFunction) -> None:
    x = torch.randn(B, D, device=device)
    w = torch.randn(D, K, device=device)
    with record() as rec:
        linear(x, w)
    (call,) = rec.calls
    assert call.cost().flops == 33_554_432
    assert str(call.cost().formula) == "2*batch*d_in*d_out"


@typed_flops
def transposed(
    x: Float[Tensor, "d_in batch"], w: Float[Tensor, "d_in d_out"]
) -> Float[Tensor, "batch d_out"]:
    return x.T @ w


@typed_flops
def through_reshapes(x: Float[Tensor, "b s d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "b s k"]:
    flat = x.reshape(-1, x.shape[-1]) @ w  # (b*s, k)
    return flat.view(x.shape[0], x.shape[1], -1) * 2  # split back into b and s


@typed_flops
def flattened(x: Float[Tensor, "b c h w"], w: Float[Tensor, "k c*h*w"]) -> Float[Tensor, "b k"]:
    return x.flatten(1) @ w.mT


def test_formulas_keep_names_through_transposes_and_reshapes() -> None:
    assert str(transposed.estimate(d_in=5, batch=7, d_out=3).formula) == "2*batch*d_in*d_out"
    cost = through_reshapes.estimate(b=2, s=3, d=5, k=7)
    assert str(cost.formula) == "b*k*s*(2*d + 1)"
    assert cost.flops == 2 * 2 * 3 * 5 * 7 + 2 * 3 * 7
    assert str(flattened.estimate(b=2, c=3, h=5, w=7, k=11).formula) == "2*b*c*h*k*w"
    x, w = torch.randn(2, 3, 5), torch.randn(5, 7)
    with record() as rec:
        through_reshapes(x, w)
    assert rec.total.flops == cost.flops
