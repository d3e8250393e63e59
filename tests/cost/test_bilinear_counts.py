"""``nn.Bilinear`` runs ``aten._trilinear`` (its gradients too), counted as torch's kernel
computes it: per output feature, two pairwise products run as ``bmm``, multiplies and sums
where a side lacks an axis, and an add into the output; its matrix products are the ``bmm``
FLOPs. Held against hand counts, a dry run on meta, and the ops the kernel runs inside
(torch's profiler sees them; a dispatch mode sees ``_trilinear`` alone, FlopCounterMode
counts it 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch
import torch.nn.functional as F
from jaxtyping import Float
from kernel_counts import Counts, flop_counter_total, on_cpu, on_meta
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

import typedflops
from typedflops import record


def bilinear_counts(n: Any, i: Any, j: Any, o: Any) -> tuple[Any, Any, Any]:
    """Forward, backward (every input, the weight and the bias requiring grad) and the
    forward's matrix products of ``nn.Bilinear(i, j, o)`` on n rows."""
    # per output feature: x1 (n, i) times the weight's slice (i, j) as one bmm, that times
    # x2 row by row (a bmm of n batches of 1 x j by j x 1), added into the output
    products = o * (2 * n * i * j + 2 * n * j)
    forward = products + o * n + n * o  # (and the bias, added to each output)
    # x1's gradient: per feature, the output's gradient times the weight's slice (a multiply
    # of n·i·j), that times x2 summed over j (a bmm), added: o·(3nij + ni)
    backward = o * (3 * n * i * j + n * i)
    # the weight's: x1 times the gradient (n·i), times x2 summed over the rows (a bmm), added
    backward += o * (n * i + 2 * n * i * j + i * j)
    # x2's: x1 times the weight's slice (a bmm), times the gradient (n·j), added (n·j)
    backward += o * (2 * n * i * j + 2 * n * j)
    backward += n * o  # the bias's: a sum of the output's gradient over the rows
    return forward, backward, products


def test_a_bilinear_layer_is_counted_on_a_cpu_and_on_meta_alike() -> None:
    bilinear = nn.Bilinear(3, 4, 5, dtype=torch.float64)

    def body(x1: Tensor, x2: Tensor) -> Tensor:
        return bilinear(x1, x2)  # type: ignore[no-any-return]

    forward, backward, products = bilinear_counts(6, 3, 4, 5)
    assert (forward, backward, products) == (1020, 3030, 960)
    annotations = [Float[Tensor, "n i"], Float[Tensor, "n j"]]
    sizes = {"n": 6, "i": 3, "j": 4}
    expected = Counts(forward, backward, ())
    assert on_cpu(body, annotations, sizes) == expected
    assert on_meta(body, annotations, sizes) == expected
    with record() as rec:
        body(torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64))
    assert (rec.total.flops, rec.total.matmul_flops, rec.total.uncounted) == (1020, 960, ())
    x1 = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    x2 = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    assert flop_counter_total(lambda: bilinear(x1, x2)) == 0  # no formula for _trilinear


def test_its_formulas_in_every_size_are_the_hand_counts() -> None:
    def body(x1: Tensor, x2: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        return F.bilinear(x1, x2, weight, bias)

    n, i, j, o = sympy.symbols("n i j o")
    cost = typedflops.estimate(
        body,
        Float[Tensor, "n i"],
        Float[Tensor, "n j"],
        Float[Tensor, "o i j"],
        Float[Tensor, " o"],
        grad=("x1", "x2", "weight", "bias"),
        n=6,
        i=3,
        j=4,
        o=5,
    )
    forward, backward, products = bilinear_counts(n, i, j, o)
    assert cost.exact and cost.uncounted == ()
    assert sympy.expand(cost.formula - forward) == 0
    assert sympy.expand(cost.backward_formula - backward) == 0
    assert sympy.expand(cost.matmul_formula - products) == 0
    assert (cost.flops, cost.backward_flops, cost.matmul_flops) == (1020, 3030, 960)
    for term in cost.terms.values():
        assert term.holds_at(cost.dims)


# -- what the kernel runs inside ------------------------------------------------------------

_ARITHMETIC = {"aten::bmm", "aten::mul", "aten::sum", "aten::add_"}


def _op_flops(name: str, shapes: list[list[int]]) -> int:
    if name == "aten::bmm":
        (batch, rows, inner), (_, _, columns) = shapes[0], shapes[1]
        return 2 * batch * rows * inner * columns
    if name == "aten::sum":
        return math.prod(shapes[0])
    # a multiply or an add: one per element of the broadcast result (axes of equal number)
    return math.prod(max(a, b) for a, b in zip(shapes[0], shapes[1], strict=True))


def _inside_trilinear(body: Callable[[], Any]) -> tuple[int, int]:
    """FLOPs of the ops that ``_trilinear`` calls run (every call, forward and backward),
    and of their ``bmm``s, as torch's profiler sees them."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        body()
    total = products = 0
    for event in prof.events():
        if event.name not in _ARITHMETIC:
            continue
        parents = []
        parent = event.cpu_parent
        while parent is not None:
            parents.append(parent.name)
            parent = parent.cpu_parent
        if "aten::_trilinear" not in parents or _ARITHMETIC & set(parents):
            continue  # (outside _trilinear, or inside one of these ops)
        flops = _op_flops(event.name, event.input_shapes)
        total += flops
        products += flops if event.name == "aten::bmm" else 0
    return total, products


def _trilinear_events(body: Callable[[], Any]) -> tuple[int, int]:
    """What typedflops counts of the ``_trilinear`` calls, forward and backward: FLOPs and
    matrix products."""
    from typedflops.cost.engine.backward import backward_of
    from typedflops.cost.engine.counter import counting
    from typedflops.cost.engine.events import Event

    class Events:
        def __init__(self) -> None:
            self.events: list[Event] = []

        def add(self, event: Event) -> None:
            self.events.append(event)

    sink = Events()
    with counting(sink):
        body()
    found = []
    for event in sink.events:
        found.append(event)
        if event.op == "_trilinear":
            found.extend(backward_of(event).events)
    chosen = [event for event in found if event.op == "_trilinear"]
    assert chosen and all(event.counted for event in chosen)
    return sum(e.flops for e in chosen), sum(e.matmul_flops for e in chosen)


@pytest.mark.parametrize(
    ("shape", "features"),
    [
        ((6,), (3, 4, 5)),
        ((2, 5), (3, 4, 2)),  # (batch axes flattened into rows)
        ((1,), (1, 4, 3)),  # (axes of 1: summed or broadcast, never a bmm's)
        ((6,), (3, 1, 1)),
    ],
)
@pytest.mark.parametrize("grad", [False, True])
def test_the_rule_is_the_work_torch_runs_inside_the_kernel(
    shape: tuple[int, ...], features: tuple[int, int, int], grad: bool
) -> None:
    torch.manual_seed(0)
    in1, in2, out = features
    bilinear = nn.Bilinear(in1, in2, out).requires_grad_(grad)
    x1 = torch.randn(*shape, in1, requires_grad=grad)
    x2 = torch.randn(*shape, in2, requires_grad=grad)

    def body() -> None:
        y = bilinear(x1, x2)
        if grad:
            torch.autograd.grad(y.sum(), [x1, x2, *bilinear.parameters()])

    def forward() -> None:
        bilinear(x1, x2)  # (the counting mode predicts the backward of what it sees)

    assert _trilinear_events(forward) == _inside_trilinear(body)
