"""A record that opens or closes inside a decorated call (its body enters or exits it, an
``ExitStack`` or a generator does) sees exactly the ops run while it was open, and the
records around it lose nothing: an outer record sees everything an inner one saw, as
FlopCounterMode nested the same way does.

Hand counts: ``x @ w`` with ``x`` 8x16 and ``w`` 16x16 is one product of P = 4,096 FLOPs.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import ExitStack

import pytest
import torch
from jaxtyping import Float
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Recorder, record, typed_flops

P = 2 * 8 * 16 * 16
X = torch.randn(8, 16)
W = torch.randn(16, 16)
_stack = ExitStack()
_opened: list[Recorder] = []


@typed_flops
def closes(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    """Two products; the records on the stack close between them."""
    y = x @ W
    _stack.close()
    return y @ W


@typed_flops
def opens(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    """A product after opening a record that stays open (once: a dry run opens none)."""
    if not _opened:
        _opened.append(_stack.enter_context(record()))
    return x @ W


@typed_flops
def nests(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    """A record around the first of two products, inside the body."""
    with record() as inside:
        y = x @ W
    assert inside.total.flops == P
    return y @ W


def test_a_record_closed_inside_a_call_keeps_the_ops_run_before() -> None:
    with FlopCounterMode(display=False) as counter, record() as outer:
        inner = _stack.enter_context(record())
        closes(X)
        X @ W
    assert (outer.total.flops, inner.total.flops) == (3 * P, P)
    assert counter.get_total_flops() == 3 * P
    assert [row.function for row in outer.calls] == ["closes"]


def test_a_record_opened_inside_a_call_stays_open_after_it_returns() -> None:
    _opened.clear()
    with record() as outer:
        opens(X)
        X @ W
        _stack.close()
        X @ W
    (inner,) = _opened
    assert (outer.total.flops, inner.total.flops) == (3 * P, 2 * P)
    assert outer.calls[0].function == "opens"


def test_a_record_in_a_calls_body_is_seen_by_the_records_around() -> None:
    with FlopCounterMode(display=False) as counter, record() as outer:
        nests(X)
        nests(X)
    assert outer.total.flops == counter.get_total_flops() == 4 * P
    (row,) = outer.calls
    assert (row.calls, row.cost().flops) == (2, 2 * P)


def _recording() -> Generator[Recorder, None, None]:
    with record() as rec:
        yield rec


def test_a_generators_record_closed_inside_a_call() -> None:
    generator = _recording()

    @typed_flops
    def closes_generator(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        y = x @ W
        generator.close()
        return y @ W

    with record() as outer:
        inner = next(generator)
        X @ W
        closes_generator(X)
        X @ W
    assert (outer.total.flops, inner.total.flops) == (4 * P, 2 * P)


def test_records_closed_inside_nested_calls_keep_what_each_call_ran() -> None:
    @typed_flops
    def inner_call(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
        return closes(x @ W)

    with record() as outer:
        inner = _stack.enter_context(record())
        inner_call(X)
        inner_call(X)  # after the inner record closed: the outer one's only
    assert (outer.total.flops, inner.total.flops) == (6 * P, 2 * P)
    assert [(row.function, row.calls) for row in outer.calls] == [("inner_call", 2)]


@typed_flops
def logs(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    """A product inside a record of its own (as code logging its costs does), then another."""
    with record():
        y = x @ W
    return y @ W


def test_a_record_in_a_body_is_estimated_and_fitted_as_the_body_runs() -> None:
    # a dry run (an estimate, a row's fit) runs the body's block: its record sees nothing
    # there, and the dry run counts the block's ops as the body's
    assert logs.estimate(n=8, d=16).flops == 2 * P
    assert str(logs.formula) == "1024*n"  # (W is 16x16 at every size)
    with record() as rec:
        logs(X)
    (row,) = rec.calls
    assert row.cost().exact and str(row.cost().formula) == "1024*n"


@typed_flops
def opens_by_hand(x: Float[Tensor, "n d"]) -> Float[Tensor, "n d"]:
    """A record entered and left by hand around its first product."""
    manager = record()
    inner = manager.__enter__()
    y = x @ W
    manager.__exit__(None, None, None)
    if not y.is_meta:  # (a dry run's record sees nothing)
        _opened.append(inner)
    return y @ W


def test_a_record_entered_by_hand_in_a_body_leaves_no_mode_behind() -> None:
    _opened.clear()
    with record() as rec:
        opens_by_hand(X)
    assert (rec.total.flops, rec.calls[0].cost().exact) == (2 * P, True)
    assert torch._C._len_torch_dispatch_stack() == torch._C._len_torch_function_stack() == 0
    with FlopCounterMode(display=False) as counter, record() as again:
        opens_by_hand(X)
    assert again.total.flops == counter.get_total_flops() == 2 * P
    assert [inner.total.flops for inner in _opened] == [P, P]


def test_a_record_entered_again_is_refused_with_the_way_out() -> None:
    block = record()
    with block as first:
        X @ W
    assert first.total.flops == P
    with pytest.raises(RuntimeError) as error, block:
        X @ W
    assert str(error.value) == (
        "this record() was entered already: each `with` block needs a record() of its own"
        " (`with record() as rec:`)"
    )
    assert first.total.flops == P  # (the refused block counted nothing, anywhere)
    with record() as again:  # a new record() works as before
        X @ W
    assert again.total.flops == P
