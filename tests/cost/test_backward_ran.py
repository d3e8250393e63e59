"""A backward pass run inside ``record()`` is counted as it ran, each time it runs: twice with
``retain_graph``, the second pass of a gradient penalty, only the products a backward over
some leaves runs, a hook's ops, ``torch.func``'s transforms. Without one, the total's backward
is the prediction (what one backward pass over everything recorded costs).

The oracle is FlopCounterMode around the same run (its total against typedflops' counts of
the kernels it has formulas for), and a hand count: ``x @ w1 @ w2`` with ``x`` 8x16 and both
weights 16x16 runs two products of P = 2·8·16·16 = 4,096 FLOPs; its sum adds 128; each
gradient of a product is one product of P.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jaxtyping import Float
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.utils.flop_counter import FlopCounterMode

from typedflops import Recorder, record, typed_flops
from typedflops.cost.engine.recorder import torch_counts
from typedflops.cost.engine.recording import launched_from

P = 2 * 8 * 16 * 16
SUM = 8 * 16

torch.manual_seed(0)
W1 = torch.randn(16, 16, requires_grad=True)
W2 = torch.randn(16, 16, requires_grad=True)


def _x(grad: bool = True) -> Tensor:
    return torch.randn(8, 16, requires_grad=grad)


def _loss(x: Tensor) -> Tensor:
    return (x @ W1 @ W2).sum()


def _retain_twice() -> None:
    loss = _loss(_x())
    loss.backward(retain_graph=True)
    loss.backward()


def _penalty() -> None:
    x = _x()
    (grad,) = torch.autograd.grad(_loss(x), x, create_graph=True)
    grad.sum().backward()  # through g = ones @ w2.T @ w1.T: 3 products


def _detached() -> None:
    hidden = (_x() @ W1).detach()
    (hidden @ W2).sum().backward()


def _hooked() -> None:
    hidden = _x() @ W1
    hidden.register_hook(lambda grad: grad @ torch.eye(16))
    (hidden @ W2).sum().backward()


def _leaf_hooked() -> None:
    # a leaf's hook runs in its AccumulateGrad node, before the add into .grad
    handle = W1.register_hook(lambda grad: grad @ torch.eye(16))
    try:
        _loss(_x()).backward()
    finally:
        handle.remove()


def _scale_grad(weight: Tensor) -> None:
    assert weight.grad is not None
    weight.grad.copy_(weight.grad @ torch.eye(16))


def _post_accumulate_hooked() -> None:
    # a hook run after the add into .grad, in the same node (as an optimizer in backward)
    handle = W2.register_post_accumulate_grad_hook(_scale_grad)
    try:
        _loss(_x()).backward()
    finally:
        handle.remove()


class _Product(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor) -> Tensor:
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        x, w = ctx.saved_tensors
        return grad @ w.t(), x.t() @ grad


def _custom() -> None:
    out: Tensor = _Product.apply(_x(), W1)  # type: ignore[no-untyped-call]
    out.sum().backward()


class _DifferentiableProduct(torch.autograd.Function):
    """``x @ w`` with a backward of two products that autograd can differentiate."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor) -> Tensor:
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        x, w = ctx.saved_tensors
        return grad @ w.t(), x.t() @ grad


def _custom_penalty() -> None:
    x = _x()
    out: Tensor = _DifferentiableProduct.apply(x, W1)  # type: ignore[no-untyped-call]
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    # the Function's backward ran its two products building a graph (a backward, no
    # forward run again); the second pass differentiates grad = ones @ W1.T: one product
    grad.sum().backward()


def _vjp() -> None:
    found = torch.func.vjp(lambda x: x @ W1 @ W2, _x(False))
    found[1](torch.ones_like(found[0]))


# (the run, its forward, its backward as it ran, FlopCounterMode's total)
CASES: dict[str, tuple[Callable[[], Any], int, int, int]] = {
    "one backward": (lambda: _loss(_x()).backward(), 2 * P + SUM, 4 * P, 6 * P),
    "retain_graph, twice": (_retain_twice, 2 * P + SUM, 8 * P, 10 * P),
    "backward(inputs=[w1])": (lambda: _loss(_x()).backward(inputs=[W1]), 2 * P + SUM, 2 * P, 4 * P),
    "grad of w2 only": (lambda: torch.autograd.grad(_loss(_x()), [W2]), 2 * P + SUM, P, 3 * P),
    "gradient penalty": (_penalty, 2 * P + 2 * SUM, 5 * P, 7 * P),
    "detach midway": (_detached, 2 * P + SUM, P, 3 * P),
    "a hook's product": (_hooked, 2 * P + SUM, 5 * P, 7 * P),
    "a leaf's hook": (_leaf_hooked, 2 * P + SUM, 6 * P, 8 * P),  # (W1's 16x16 product: 2P)
    "a post-accumulate-grad hook": (_post_accumulate_hooked, 2 * P + SUM, 6 * P, 8 * P),
    "once_differentiable": (_custom, P + SUM, 2 * P, 3 * P),
    "a Function's gradient penalty": (_custom_penalty, P + 2 * SUM, 3 * P, 4 * P),
    "torch.func.grad": (lambda: torch.func.grad(_loss)(_x(False)), 2 * P + SUM, 2 * P, 4 * P),
    "torch.func.vjp": (_vjp, 2 * P, 2 * P, 4 * P),
}


def _recorded(run: Callable[[], Any]) -> tuple[Recorder, int]:
    with FlopCounterMode(display=False) as counter:
        run()
    with record() as rec:
        run()
    return rec, int(counter.get_total_flops())


@pytest.mark.parametrize("case", CASES)
def test_each_backward_is_counted_as_it_ran(case: str) -> None:
    run, forward, backward, flop_counter = CASES[case]
    rec, counted = _recorded(run)
    total = rec.total
    assert (total.flops, total.backward_flops, total.recompute_flops) == (forward, backward, 0)
    assert counted == flop_counter == sum(torch_counts(rec.session.root))
    assert total.uncounted == ()


def test_a_total_that_ran_otherwise_than_predicted_is_a_count_not_a_formula() -> None:
    @typed_flops
    def layer(x: Float[Tensor, "n d"], w: Float[Tensor, "d d"]) -> Float[Tensor, "n d"]:
        return x @ w

    x = _x()
    with record() as rec:
        loss = layer(layer(x, W1), W2).sum()
        loss.backward(retain_graph=True)
        loss.backward()
    (row,) = rec.calls
    # a row is the cost of one call, its backward predicted (a product per operand)
    assert (row.calls, row.cost().backward_flops) == (2, 2 * P)
    total = rec.total
    assert total.backward_flops == 8 * P
    assert not total.backward.exact and str(total.backward_formula) == str(8 * P)
    assert "~" in rec.table().splitlines()[-2]
    # run once, as predicted: the formula stays
    with record() as once:
        layer(layer(x, W1), W2).sum().backward()
    assert once.total.backward_flops == 4 * P and once.total.backward.exact
    assert str(once.total.backward_formula) == "8*d**2*n"


def test_without_a_backward_in_the_block_the_backward_is_predicted() -> None:
    with record() as rec:
        loss = _loss(_x())
    loss.backward()  # after the block: not part of it
    assert (rec.total.flops, rec.total.backward_flops) == (2 * P + SUM, 4 * P)


def test_nested_records_each_count_the_backward_run_inside_them() -> None:
    with record() as outer:
        _loss(_x()).backward()
        with record() as inner:
            _retain_twice()
    assert (outer.total.backward_flops, inner.total.backward_flops) == (12 * P, 8 * P)


def test_a_backward_inside_a_decorated_call_is_counted_once() -> None:
    @typed_flops
    def step(x: Float[Tensor, "n d"]) -> Float[Tensor, ""]:
        loss = _loss(x)
        loss.backward()
        return loss.detach()

    rec, counted = _recorded(lambda: step(_x()))
    assert (rec.total.flops, rec.total.backward_flops) == (2 * P + SUM, 4 * P)
    assert counted == sum(torch_counts(rec.session.root)) == 6 * P


def test_gradients_accumulated_over_steps_add_no_flops_of_their_own() -> None:
    def steps() -> None:
        for _ in range(3):
            _loss(_x()).backward()

    rec, counted = _recorded(steps)
    # the adds into .grad of the second and third steps are not backward ops
    assert rec.total.backward_flops == 3 * 4 * P
    assert counted == sum(torch_counts(rec.session.root)) == 3 * 6 * P


def test_a_backward_of_a_graph_built_before_the_block_is_what_the_block_ran() -> None:
    loss = _loss(_x())
    with FlopCounterMode(display=False) as counter:
        loss.backward(retain_graph=True)
    with record() as rec:
        loss.backward()
    assert (rec.total.flops, rec.total.backward_flops) == (0, 4 * P)
    assert counter.get_total_flops() == sum(torch_counts(rec.session.root)) == 4 * P


def test_a_device_thread_of_autograd_finds_the_records_that_started_its_backward() -> None:
    # autograd's engine runs a GPU's backward ops on a thread of its own, handing it a copy
    # of the context the backward began in (as torch.autograd.backward stashes it)
    found: list[object] = []

    def device_thread(context: contextvars.Context) -> None:
        found.append(launched_from())
        torch._C._stash_obj_in_tls("context", context)
        try:
            found.append(launched_from())
        finally:
            torch._C._remove_obj_from_tls("context")

    with record() as rec:
        thread = threading.Thread(target=device_thread, args=(contextvars.copy_context(),))
        thread.start()
        thread.join()
    before, during = found
    assert before is None
    assert isinstance(during, tuple) and [call.session for call in during] == [rec.session]


@pytest.mark.parametrize(
    "cast",
    [
        lambda x: torch.softmax(x, 0, dtype=torch.float64),  # (_to_copy given device=cpu)
        lambda x: x.to("cpu", torch.float64).softmax(0),
    ],
)
def test_an_op_given_its_device_is_predicted_as_a_dry_run_predicts_it(
    cast: Callable[[Tensor], Tensor],
) -> None:
    x = torch.randn(5, requires_grad=True)
    with record() as predicted:
        cast(x)
    with record() as ran:
        cast(x).sum().backward()
    # softmax's backward kernel 4 a value; the cast's backward a copy (free); the sum's 0
    assert predicted.total.uncounted == ran.total.uncounted == ()
    assert predicted.total.backward_flops == 4 * 5
    assert ran.total.backward_flops == 4 * 5


def test_an_optimizer_stepped_in_backward_is_counted_as_it_ran() -> None:
    # torch's recipe for a step fused into the backward pass: one optimizer a parameter,
    # stepped by its post-accumulate-grad hook (SGD: an add scaled by the rate, 2 a value)
    w1, w2 = W1.detach().clone().requires_grad_(), W2.detach().clone().requires_grad_()
    optimizers = {w: torch.optim.SGD([w], lr=0.1, foreach=False) for w in (w1, w2)}

    def step(weight: Tensor) -> None:
        optimizers[weight].step()
        optimizers[weight].zero_grad()

    handles = [w.register_post_accumulate_grad_hook(step) for w in (w1, w2)]
    with record() as rec:
        for _ in range(2):
            (_x() @ w1 @ w2).sum().backward()
    for handle in handles:
        handle.remove()
    assert (rec.total.flops, rec.total.backward_flops) == (
        2 * (2 * P + SUM),
        2 * (4 * P + 2 * 2 * 256),
    )
