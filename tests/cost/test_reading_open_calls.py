"""A record read inside decorated calls that have not returned counts what ran so far.

Read there (in the body, in a nested call, in a module's hook), the calls still open count
their ops so far as the record's own, as they would if the block ended there; nothing is
moved, so the total once they return is what it is when nothing is read. Hand counts: a
(16, 32) @ (32, 2) product is 2*16*32*2 = 2,048 FLOPs; relu, ``* 2`` and ``+ 1`` on its
(16, 2) result 32 each; ``x.sum()`` of (16, 32) 512.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Float
from torch import Tensor, nn

from typedflops import record, typed_flops
from typedflops.cost.engine.report import Recorder

X, W = torch.randn(16, 32), torch.randn(32, 2)


def _holds(rec: Recorder) -> int:
    """The total's FLOPs, after checking its formula evaluates to them."""
    total = rec.total
    values = {sympy.Symbol(name): value for name, value in total.dims.items()}
    assert int(total.formula.xreplace(values)) == total.flops
    return total.flops


def test_a_read_in_the_body_counts_each_op_run_so_far() -> None:
    seen: list[tuple[str, int]] = []

    def read(where: str, tensor: Tensor) -> None:
        if tensor.device.type != "meta":  # (a dry run that fits the formula runs it too)
            seen.append((where, _holds(rec)))

    @typed_flops
    def inner(y: Float[Tensor, "n k"]) -> Float[Tensor, "n k"]:
        z = y * 2
        read("inner", z)
        return z

    @typed_flops
    def f(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
        read("start", x)
        y = torch.relu(x @ w)
        read("relu", x)
        z = inner(y)
        read("after inner", x)
        return z + 1

    with record() as rec:
        X.sum()
        read("root", X)
        f(X, W)
        read("after f", X)
    assert seen == [
        ("root", 512),
        ("start", 512),
        ("relu", 512 + 2048 + 32),
        ("inner", 512 + 2048 + 32 + 32),
        ("after inner", 512 + 2048 + 32 + 32),
        ("after f", 512 + 2048 + 32 + 32 + 32),
    ]
    assert rec.total.flops == 512 + 2048 + 32 * 3
    assert [row.function for row in rec.calls] == ["f"]  # (inner is f's, once f returned)


def test_a_read_in_a_module_hook_inside_a_decorated_call() -> None:
    seen: list[int] = []
    layer = nn.Linear(32, 2)

    def hook(module: nn.Module, inputs: object, output: Tensor) -> None:
        if output.device.type != "meta":
            seen.append(_holds(rec))

    layer.register_forward_hook(hook)

    @typed_flops
    def f(x: Float[Tensor, "n d"]) -> Float[Tensor, "n k"]:
        return torch.relu(layer(x))

    with record() as rec:
        f(X)
    # the hook runs after the layer's addmm (2,048, its bias added in the product's
    # accumulation, as FlopCounterMode counts it), before relu
    assert seen == [2048]
    assert rec.total.flops == 2048 + 32


def test_reading_inside_changes_nothing_the_record_counts() -> None:
    @typed_flops
    def f(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"], read: bool) -> Float[Tensor, "n k"]:
        y = torch.relu(x @ w)
        if read and x.device.type != "meta":
            _ = rec.total, rec.table(), rec.rows()
        return y * 2

    totals = []
    for read in (False, True):
        with record() as rec:
            f(X, W, read)
            f(X, W, read)
        totals.append((rec.total.flops, rec.total.bytes, [r.calls for r in rec.calls]))
    assert totals[0] == totals[1] == (2 * (2048 + 64), totals[0][1], [2])


_OPS: dict[str, tuple[Callable[[Tensor], Tensor], int]] = {
    "relu": (torch.relu, 32),
    "double": (lambda t: t * 2, 32),
    "shift": (lambda t: t + 1, 32),
    "square": (lambda t: t * t, 32),
}


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.sampled_from(sorted(_OPS)), min_size=1, max_size=6),
    st.data(),
)
def test_a_read_at_any_point_is_what_ran_so_far(ops: list[str], data: st.DataObject) -> None:
    at = data.draw(st.integers(0, len(ops)), label="read after this many ops")
    seen: list[int] = []

    @typed_flops
    def f(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
        y = x @ w
        for index, name in enumerate(ops):
            if index == at and x.device.type != "meta":
                seen.append(_holds(rec))
            y = _OPS[name][0](y)
        if at == len(ops) and x.device.type != "meta":
            seen.append(_holds(rec))
        return y

    with record() as rec:
        f(X, W)
    assert seen == [2048 + sum(_OPS[name][1] for name in ops[:at])]
    assert rec.total.flops == 2048 + sum(_OPS[name][1] for name in ops)


class _Block(nn.Module):
    """A typed module whose forward reads the record after its layer: (n, 32) -> (n, 2)."""

    def __init__(self, read: Callable[[str, Tensor], None]) -> None:
        super().__init__()
        self.layer = nn.Linear(32, 2)
        self.read = read

    @typed_flops
    def forward(self, x: Float[Tensor, "n d"]) -> Float[Tensor, "n k"]:
        h = self.layer(x)
        self.read("forward", h)
        return torch.relu(h)


def test_a_read_in_a_typed_modules_forward_and_in_a_backward_hook() -> None:
    seen: list[tuple[str, int, int]] = []
    running = [True]  # (the row's fit, after the block, runs the body on fake tensors)

    def read(where: str, tensor: Tensor) -> None:
        if running[0] and tensor.device.type != "meta":
            seen.append((where, _holds(rec), rec.total.backward_flops))

    block = _Block(read)
    block.layer.weight.requires_grad_(True)

    @typed_flops
    def step(x: Float[Tensor, "n d"]) -> Float[Tensor, ""]:
        y = block(x)
        y.register_hook(lambda grad: read("backward hook", grad))
        loss = y.sum()
        loss.backward()
        read("after backward", x)
        return loss.detach()

    with record() as rec:
        step(X)
        running[0] = False
    # forward: the layer's addmm 2,048 (its bias added in the product), relu 32, sum 32;
    # backward (x takes no gradient): relu's 32, the weight's product (2, 16) @ (16, 32)
    # 2*2*16*32 = 2,048 and the bias's sum over 16 rows of 2, 32. Before a backward runs
    # the record foresees the addmm's (2,048 + 32); the hook on relu's output runs before
    # any backward op, and a backward begun counts what it ran (none yet)
    assert seen == [
        ("forward", 2048, 2048 + 32),
        ("backward hook", 2048 + 32 + 32, 0),
        ("after backward", 2048 + 32 + 32, 32 + 2048 + 32),
    ]
    assert (rec.total.flops, rec.total.backward_flops) == (2048 + 64, 32 + 2048 + 32)


def test_a_read_from_another_thread_leaves_out_the_calls_still_open() -> None:
    seen: list[tuple[str, int]] = []

    def read_aside(where: str) -> None:
        found: list[int] = []
        reader = threading.Thread(target=lambda: found.append(rec.total.flops))
        reader.start()
        reader.join()
        seen.append((where, found[0]))

    @typed_flops
    def f(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
        y = torch.relu(x @ w)
        if x.device.type != "meta":
            read_aside("inside f")
        return y

    with record() as rec:
        f(X, W)
        read_aside("after the first f")
        f(X, W)
    # another thread sees the calls that returned to the block, not the one still open
    assert seen == [("inside f", 0), ("after the first f", 2080), ("inside f", 2080)]
    assert rec.total.flops == 2 * 2080


def _figures(rec: Recorder) -> tuple[int, int, int]:
    """The total's forward FLOPs, backward FLOPs and bytes moved."""
    total = rec.total
    return total.flops, total.backward_flops, total.bytes


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.sampled_from(sorted(_OPS)), min_size=1, max_size=5),
    st.data(),
)
def test_a_read_inside_is_a_fresh_record_of_the_ops_so_far(
    ops: list[str], data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(ops)), label="read after this many ops")
    nested = data.draw(st.booleans(), label="the ops run in a nested decorated call")
    seen: list[tuple[int, int, int]] = []

    def run(y: Tensor, read: bool) -> Tensor:
        """The drawn ops on a (16, 2) tensor, the record read after ``at`` of them."""
        for index, name in enumerate([*ops, None]):
            if read and index == at and y.device.type != "meta":
                seen.append(_figures(rec))
            if name is not None:
                y = _OPS[name][0](y)
        return y

    @typed_flops
    def inner(y: Float[Tensor, "n k"], read: bool) -> Float[Tensor, "n k"]:
        return run(y, read)

    @typed_flops
    def f(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"], read: bool) -> Float[Tensor, "n k"]:
        y = x @ w
        return inner(y, read) if nested else run(y, read)

    finals = []
    for read in (False, True):
        with record() as rec:
            f(X, W, read)
        finals.append((_figures(rec), [(row.function, row.calls) for row in rec.calls], rec.rows()))
    assert finals[0] == finals[1]
    with record() as fresh:
        y = X @ W
        for name in ops[:at]:
            y = _OPS[name][0](y)
    assert seen == [_figures(fresh)]


def test_a_read_inside_a_second_call_keeps_the_first_calls_formula() -> None:
    formulas: list[sympy.Expr] = []

    @typed_flops
    def f(x: Float[Tensor, "n d"], w: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
        y = torch.relu(x @ w)
        if x.device.type != "meta":
            _holds(rec)
            formulas.append(rec.total.formula)
        return y

    with record() as rec:
        f(X, W)
        f(X, W)
    n, d, k = sympy.symbols("n d k")
    # a call still open counts as ops of the record's own, a number (2*16*32*2 + 16*2),
    # as ops outside calls do; a call that returned keeps its row's formula
    assert [sympy.expand(formula) for formula in formulas] == [
        2080,
        sympy.expand(n * k * (2 * d + 1) + 2080),
    ]
    assert sympy.expand(rec.total.formula - 2 * n * k * (2 * d + 1)) == 0
