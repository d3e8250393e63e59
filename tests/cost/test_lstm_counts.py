"""``nn.LSTM`` on a CPU runs oneDNN's fused layer kernel (``mkldnn_rnn_layer``); on meta, in a
dry run, torch runs it step by step. Both are counted alike, forward and backward, and equal
the hand count of ``nn.LSTMCell`` run once per step; so are their matrix products (the
``matmul`` term), the fused kernel's part of its count.
"""

from __future__ import annotations

from typing import Any

import pytest
import sympy
import torch
from jaxtyping import Float
from kernel_counts import Counts, flop_counter_total, on_cpu, on_meta, recorded
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

import typedflops
from typedflops import record, typed_flops
from typedflops.cost.engine.backward import backward_of
from typedflops.cost.engine.counter import counting
from typedflops.cost.engine.events import Event


def lstm_counts(
    features: int,
    hidden: int,
    batch: int,
    steps: int,
    *,
    layers: int = 1,
    directions: int = 1,
    bias: bool = True,
    initial_state: bool = False,
) -> tuple[int, int]:
    """Forward and backward FLOPs of an LSTM whose input and initial state require grad
    (the state only when given)."""
    forward = backward = 0
    positions = batch * steps
    for layer in range(layers):
        inputs = features if layer == 0 else hidden * directions
        # each direction reads the layer's input: autograd sums their gradients of it
        backward += (directions - 1) * positions * inputs
        for _ in range(directions):
            # the gates' two products and 13 elementwise ops per hidden value and step
            forward += positions * (8 * hidden * (inputs + hidden) + 13 * hidden)
            # the weights' and the input's gradients, the biases' sums over the batch
            backward += positions * (8 * hidden * (inputs + hidden) + 8 * hidden * inputs)
            backward += positions * 8 * hidden if bias else 0
            # the hidden state's gradient through w_hh at every step but the first, and the
            # cell's 11 elementwise ops per step (the first step's c0 needs no gradient)
            backward += batch * (steps - 1) * 8 * hidden * hidden
            backward += 11 * hidden * positions - batch * hidden
            if initial_state:
                backward += batch * (8 * hidden * hidden + hidden)
    return forward, backward


def lstm_products(
    features: int, hidden: int, batch: int, steps: int, *, layers: int = 1, directions: int = 1
) -> int:
    """The forward's matrix products: the gates' two, 8H·(I + H) per position, per layer
    and direction (the biases not counted, as addmm's are not)."""
    count = 0
    for layer in range(layers):
        inputs = features if layer == 0 else hidden * directions
        count += directions * batch * steps * 8 * hidden * (inputs + hidden)
    return count


class _Ops(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.names: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.add(func._overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


CASES = [
    ("one-layer", {}, {}),
    ("no-bias", {"bias": False}, {"bias": False}),
    ("two-layers", {"num_layers": 2}, {"layers": 2}),
    ("bidirectional", {"bidirectional": True}, {"directions": 2}),
]


@pytest.mark.parametrize(
    ("options", "shape"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_an_lstm_is_counted_alike_fused_on_a_cpu_and_step_by_step_on_meta(
    options: dict[str, Any], shape: dict[str, Any]
) -> None:
    torch.manual_seed(0)
    lstm = nn.LSTM(3, 5, batch_first=True, **options)
    forward, backward = lstm_counts(3, 5, 2, 7, **shape)
    expected = Counts(forward, backward, ())

    def body(x: Tensor) -> Tensor:
        return lstm(x)[0]  # type: ignore[no-any-return]

    annotation = [Float[Tensor, "b s i"]]
    sizes = {"b": 2, "s": 7, "i": 3}
    assert on_cpu(body, annotation, sizes, dtype=torch.float32) == expected
    assert on_meta(body, annotation, sizes, dtype=torch.float32) == expected


def test_an_initial_state_that_requires_grad_adds_the_first_steps_gradients() -> None:
    lstm = nn.LSTM(4, 6)  # (sequence, batch, features)
    x = torch.randn(5, 3, 4, requires_grad=True)
    state = torch.zeros(1, 3, 6, requires_grad=True)
    forward, backward = lstm_counts(4, 6, 3, 5, initial_state=True)
    # one tensor as both h0 and c0: autograd sums its two gradients (3 x 6 adds)
    backward += 3 * 6
    assert recorded(lambda: lstm(x, (state, state))[0]) == Counts(forward, backward, ())


def test_the_fused_kernel_is_what_runs_on_a_cpu_and_flop_counter_mode_counts_it_zero() -> None:
    lstm = nn.LSTM(3, 5, batch_first=True)
    x = torch.randn(2, 7, 3, requires_grad=True)
    with _Ops() as ops:
        lstm(x)
    onednn = torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
    assert ("mkldnn_rnn_layer" in ops.names) == onednn
    # where typedflops departs: FlopCounterMode has no formula for the fused kernels
    if "mkldnn_rnn_layer" in ops.names:
        assert flop_counter_total(lambda: lstm(x)[0]) == 0


def test_one_step_is_an_lstm_cell() -> None:
    cell = nn.LSTMCell(3, 5)
    x = torch.randn(2, 3)
    # 8H(I + H) + 13H per batch row: 2 x (320 + 65)
    assert recorded(lambda: cell(x)).forward == lstm_counts(3, 5, 2, 1)[0] == 770


@pytest.mark.parametrize(
    ("options", "shape"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_the_fused_kernels_matrix_products_are_its_matmul_flops(
    options: dict[str, Any], shape: dict[str, Any]
) -> None:
    torch.manual_seed(0)
    lstm = nn.LSTM(3, 5, batch_first=True, **options)
    x = torch.randn(2, 7, 3, requires_grad=True)
    products = lstm_products(
        3, 5, 2, 7, layers=shape.get("layers", 1), directions=shape.get("directions", 1)
    )
    with record() as forward:
        lstm(x)
    with record() as both:
        lstm(x)[0].sum().backward()
    # the matmul term is the forward's products, whatever else ran
    assert forward.total.matmul_flops == both.total.matmul_flops == products
    assert forward.total.flops == lstm_counts(3, 5, 2, 7, **shape)[0]
    # one model, one count: the step-by-step path on meta runs them as addmm
    estimated = typedflops.estimate(
        lstm, Float[Tensor, "b s i"], dtype=torch.float32, b=2, s=7, i=3
    )
    assert estimated.matmul_flops == products
    assert estimated.matmul.holds_at(estimated.dims)


def test_the_matmul_formula_of_the_fused_kernel_is_its_products() -> None:
    lstm = nn.LSTM(3, 5, batch_first=True)
    b, s = sympy.symbols("b s")

    def body(x: Tensor) -> Tensor:
        return lstm(x)[0]  # type: ignore[no-any-return]

    # a dry run on the CPU module's own tensors: the fused kernel, each size changed
    cost = typedflops.estimate(
        body, Float[Tensor, "b s i"], dtype=torch.float32, grad=("x",), b=2, s=7, i=3
    )
    assert cost.exact and cost.matmul.holds_at(cost.dims)
    assert (cost.matmul_flops, cost.matmul_formula) == (2 * 7 * 320, 320 * b * s)
    assert cost.formula == 385 * b * s  # and 13H elementwise per position besides

    @typed_flops
    def layer(x: Float[Tensor, "b s 3"]) -> Float[Tensor, "b s 5"]:
        return lstm(x)[0]  # type: ignore[no-any-return]

    with record() as rec:
        layer(torch.randn(2, 7, 3))
    (row,) = rec.calls
    fitted = row.cost()
    assert fitted.matmul_formula == 320 * b * s and fitted.matmul.holds_at(fitted.dims)
    assert rec.total.matmul_flops == fitted.matmul_flops == 2 * 7 * 320


class _Events:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, event: Event) -> None:
        self.events.append(event)


def test_the_fused_backwards_matrix_products_are_its_events_matmul_flops() -> None:
    lstm = nn.LSTM(3, 5, batch_first=True)
    x = torch.randn(2, 7, 3, requires_grad=True)
    sink = _Events()
    with counting(sink):
        lstm(x)
    (layer,) = [event for event in sink.events if event.op == "mkldnn_rnn_layer"]
    assert (layer.flops, layer.matmul_flops) == (5390, 2 * 7 * 8 * 5 * (3 + 5))
    (found,) = [e for e in backward_of(layer).events if e.op == "mkldnn_rnn_layer_backward"]
    # 14 positions: the weights' gradients 8H(I + H), the input's 8HI, the hidden state's
    # 8H² at the 12 after the first step; not the elementwise ops or the biases' sums
    assert found.matmul_flops == 14 * 8 * 5 * (3 + 5) + 14 * 8 * 5 * 3 + 12 * 8 * 5 * 5 == 8560
    assert found.flops == lstm_counts(3, 5, 2, 7)[1] == 9880
