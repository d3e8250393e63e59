"""An in-place op reaches backward as an out-of-place op does: only if the tensor it wrote
is read by an op that reaches backward or is a result. Random programs of in-place ops
(``sigmoid_``, ``tanh_``, ``mul_``, a write through a slice) whose results are sometimes
used and sometimes not, inside a decorated call; and torch's CPU LSTM and GRU cells (which
write their gates in place) with one of their results used.

The oracle is the backward that runs inside ``record()``; a record of the same call without
the backward, and ``estimate()``, predict it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from kernel_counts import ran_and_predicted
from torch import Tensor, nn

from typedflops import estimate, record, typed_flops

_Step = tuple[str, int, int]

_KINDS = ("exp", "mul", "add", "slice", "sigmoid_", "tanh_", "mul_", "slice sigmoid_")


def _run(x: Tensor, steps: list[_Step], used: int) -> Tensor:
    """The program ``steps`` spell, from ``x * 1``: each step makes a tensor from those made
    so far or writes one in place; the result sums the tensors whose bit is set in ``used``
    (the last one where none is)."""
    pool = [x * 1.0]
    for kind, first, second in steps:
        a, b = pool[first % len(pool)], pool[second % len(pool)]
        if kind == "exp":
            pool.append(torch.exp(a))
        elif kind in ("mul", "add") and a.shape == b.shape:
            pool.append(a * b if kind == "mul" else a + b)
        elif kind == "slice" and a.shape[0] > 1:
            pool.append(a[1:])
        elif kind == "sigmoid_":
            a.sigmoid_()
        elif kind == "tanh_":
            a.tanh_()
        elif kind == "mul_" and a.shape == b.shape and a is not b:
            a.mul_(b)
        elif kind == "slice sigmoid_" and a.shape[0] > 1:
            a[1:].sigmoid_()
    chosen = [tensor for index, tensor in enumerate(pool) if used >> index & 1] or pool[-1:]
    total = chosen[0].sum()
    for tensor in chosen[1:]:
        total = total + tensor.sum()
    return total


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(_KINDS), st.integers(0, 15), st.integers(0, 15)),
        min_size=1,
        max_size=7,
    ),
    used=st.integers(0, 255),
)
def test_in_place_ops_whose_results_go_unused_predict_the_backward_that_runs(
    steps: list[_Step], used: int
) -> None:
    try:  # (autograd refuses a write to a tensor an op saved for its backward)
        _run(torch.randn(4, 4, requires_grad=True), steps, used).backward()
    except RuntimeError:
        assume(False)

    @typed_flops
    def program(x: Float[Tensor, "4 4"]) -> Float[Tensor, ""]:
        return _run(x, steps, used)

    ran, predicted = ran_and_predicted(program)
    assert predicted == ran
    cost = estimate(program, grad=("x",))
    assert (cost.backward_flops, cost.exact) == (ran, True)


def test_an_in_place_op_whose_result_no_op_reads_costs_no_backward() -> None:
    # h = x * 1; e = exp(h); h.sigmoid_(); only e used: exp's backward (16 multiplies) and
    # the product's (16), no sigmoid_backward (it would add 3 a value: 48)
    steps = [("exp", 0, 0), ("sigmoid_", 0, 0)]

    @typed_flops
    def program(x: Float[Tensor, "4 4"]) -> Float[Tensor, ""]:
        return _run(x, steps, 0b10)

    assert ran_and_predicted(program) == (32, 32)
    assert estimate(program, grad=("x",)).backward_flops == 32


def _layer(kind: str) -> nn.RNNBase:
    torch.manual_seed(0)
    return (nn.LSTM if kind == "lstm" else nn.GRU)(3, 4).double()


_PICKS: dict[str, Callable[[tuple[Tensor, ...]], Tensor]] = {
    "output": lambda result: result[0],
    "h_n": lambda result: result[1][0] if isinstance(result[1], tuple) else result[1],
    "c_n": lambda result: result[1][1],
}


# The backward FLOPs autograd runs for a float64 layer of 3 features and 4 hidden values,
# seq 3, batch 2, from the sum of one of its results. An LSTM's c_n alone skips the last
# step's output gate (its sigmoid_backward: 8 values, one FLOP each as counted) and the
# h_n product, which feed h_n alone.
@pytest.mark.parametrize(
    ("kind", "pick", "flops"),
    [
        ("lstm", "c_n", 2448),
        ("lstm", "h_n", 2480),
        ("lstm", "output", 2496),
        ("gru", "h_n", 1888),
        ("gru", "output", 1904),
    ],
)
def test_a_cpu_recurrent_layer_with_one_result_used_costs_the_backward_that_runs(
    kind: str, pick: str, flops: int
) -> None:
    model = _layer(kind)

    def used(x: Float[Tensor, "s b i"]) -> Tensor:
        return _PICKS[pick](model(x)).sum()

    x = torch.randn(3, 2, 3, dtype=torch.float64)
    with record() as ran:
        used(x).backward()
    assert ran.total.backward_flops == flops
    cost = estimate(used, Float[Tensor, "s b i"], s=3, b=2, i=3, dtype=torch.float64)
    assert (cost.backward_flops, cost.exact) == (flops, True)
    with record() as predicted:
        typed_flops(used)(x)
    assert predicted.total.backward_flops == flops
