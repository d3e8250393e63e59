"""An optimizer's step, held against hand counts on a real CPU run (``record()``): its
``_foreach_*`` ops (``foreach=True``), the same step one tensor at a time (``foreach=False``)
and the fused kernel (``fused=True``) count alike; the ``_foreach_*`` ops on meta
(``estimate()``) count as on a CPU.

The model is Linear(4, 3) and Linear(3, 2): 12 + 3 + 6 + 2 = 23 parameter values, P = 23, in
4 tensors (Adam's step counters add 1 each: ``_foreach_add_(steps, 1)``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from jaxtyping import Float
from torch import Tensor

import typedflops
from typedflops import record

P = 23
TENSORS = 4

# Adam per value: lerp 3, mul 1, addcmul 2, sqrt, divide, add 3, addcdiv 2 (11); Adam's
# weight decay an add scaled by it (2; 1 at a decay of 1), AdamW's a multiply (1);
# maximize a negation, amsgrad a maximum (1 each). The second step, with its counters.
ADAM: list[tuple[str, Any, dict[str, Any], int]] = [
    ("adam", torch.optim.Adam, {}, 11 * P + TENSORS),
    ("adam-decay", torch.optim.Adam, {"weight_decay": 0.1}, 13 * P + TENSORS),
    ("adam-decay-1", torch.optim.Adam, {"weight_decay": 1.0}, 12 * P + TENSORS),
    ("adam-amsgrad", torch.optim.Adam, {"amsgrad": True}, 12 * P + TENSORS),
    ("adam-maximize", torch.optim.Adam, {"maximize": True}, 12 * P + TENSORS),
    (
        "adam-all",
        torch.optim.Adam,
        {"amsgrad": True, "maximize": True, "weight_decay": 0.1},
        15 * P + TENSORS,
    ),
    ("adamw", torch.optim.AdamW, {}, 12 * P + TENSORS),  # (weight_decay=0.01)
    ("adamw-all", torch.optim.AdamW, {"amsgrad": True, "maximize": True}, 14 * P + TENSORS),
    # SGD per value: the update p - lr·g 2; momentum buf·m + g (2; 3 with dampening) from the
    # second step on; nesterov g + m·buf 2; weight decay 2 (1 at a decay of 1); maximize 1
    ("sgd", torch.optim.SGD, {"lr": 0.1}, 2 * P),
    ("sgd-momentum", torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, 4 * P),
    ("sgd-dampening", torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "dampening": 0.1}, 5 * P),
    (
        "sgd-nesterov",
        torch.optim.SGD,
        {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
        8 * P,
    ),
    (
        "sgd-ones",  # momentum and decay of 1: their adds unscaled
        torch.optim.SGD,
        {"lr": 0.1, "momentum": 1.0, "nesterov": True, "weight_decay": 1.0, "maximize": True},
        7 * P,
    ),
]


def _second_step(optimizer: Any, options: dict[str, Any], kind: dict[str, bool]) -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    step = optimizer(model.parameters(), **options, **kind)
    model(torch.randn(2, 4)).sum().backward()
    step.step()  # (the first step makes the state)
    model(torch.randn(2, 4)).sum().backward()
    with record() as rec:
        step.step()
    return rec.total


@pytest.mark.parametrize(
    ("optimizer", "options", "expected"), [c[1:] for c in ADAM], ids=[c[0] for c in ADAM]
)
@pytest.mark.parametrize("kind", ["foreach", "loop", "fused"])
def test_an_optimizer_step_counts_alike_however_torch_runs_it(
    optimizer: Any, options: dict[str, Any], expected: int, kind: str
) -> None:
    chosen = {"foreach": {"foreach": True}, "loop": {"foreach": False}, "fused": {"fused": True}}
    total = _second_step(optimizer, options, chosen[kind])
    assert (total.flops, total.uncounted) == (expected, ())


@pytest.mark.parametrize(
    "optimizer",
    [torch.optim.RMSprop, torch.optim.NAdam, torch.optim.Adamax, torch.optim.Adadelta],
    ids=["rmsprop", "nadam", "adamax", "adadelta"],
)
def test_other_optimizers_count_alike_with_foreach_and_without(optimizer: Any) -> None:
    foreach = _second_step(optimizer, {}, {"foreach": True})
    loop = _second_step(optimizer, {}, {"foreach": False})
    assert (foreach.flops, foreach.uncounted) == (loop.flops, ()) != (0, ())


# Paths that run other arithmetic, each counted as it runs. Adagrad: addcmul 2, sqrt and add 2,
# addcdiv 2 (the step size its value); foreach multiplies the gradients by the step size
# first (1). RAdam at its second step (variance not yet tractable): lerp 3, mul 1, addcmul 2,
# the bias correction's divide, the product by lr and the update scaled by -1 (1 + 1 + 2);
# foreach computes the adaptive term anyway (sqrt, add, divide, reciprocal, add: 5) and
# updates with addcmul (2).
OTHER = [
    ("adagrad", torch.optim.Adagrad, 7 * P + TENSORS, 6 * P + TENSORS),
    ("radam", torch.optim.RAdam, 13 * P + TENSORS, 10 * P + TENSORS),
]


@pytest.mark.parametrize(
    ("optimizer", "foreach", "loop"), [c[1:] for c in OTHER], ids=[c[0] for c in OTHER]
)
def test_optimizers_whose_paths_differ_count_each_as_it_runs(
    optimizer: Any, foreach: int, loop: int
) -> None:
    assert _second_step(optimizer, {}, {"foreach": True}).flops == foreach
    assert _second_step(optimizer, {}, {"foreach": False}).flops == loop


def test_clipping_gradients_counts_alike_with_foreach_and_without() -> None:
    # the 4 norms (2 per value, a root each), the norm of the 4 (2·4 + 1), the coefficient
    # max / (norm + ε) as an add, a reciprocal and a product, a clamp, and each value scaled
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    model(torch.randn(2, 4)).sum().backward()
    for foreach in (True, False):
        with record() as rec:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01, foreach=foreach)
        assert (rec.total.flops, rec.total.uncounted) == ((2 * P + 4) + 9 + 3 + 1 + P, ())


A = Float[Tensor, "a b"]
C = Float[Tensor, "c"]


def _lists(x: Tensor, y: Tensor) -> Any:
    torch._foreach_addcmul_([x, y], [x, y], [x, y], value=0.5)
    torch._foreach_add_([x, y], [y.sum(), x.sum()], alpha=2.0)  # (the sums: a·b + c)
    return torch._foreach_norm(torch._foreach_lerp([x, y], [x, y], 0.25))


def test_foreach_ops_count_their_op_on_each_tensor_on_a_cpu_and_on_meta() -> None:
    # a = 3, b = 4, c = 5 (17 values): addcmul 2, an add scaled by alpha 2, lerp 3 per value,
    # the norms 2 per value and a root each; the two sums 17
    expected = 2 * 17 + 2 * 17 + 17 + 3 * 17 + (2 * 17 + 2)
    with record() as rec:
        _lists(torch.randn(3, 4), torch.randn(5))
    assert (rec.total.flops, rec.total.uncounted) == (expected, ())
    cost = typedflops.estimate(_lists, A, C, a=3, b=4, c=5)
    assert (cost.flops, cost.uncounted, cost.exact) == (expected, (), True)
    assert str(cost.formula) == "2*(5*a*b + 5*c + 1)"


def test_a_complex_foreach_op_counts_complex_arithmetic() -> None:
    # a complex multiply is 6 real FLOPs; a zeroed list and a copied one cost 0
    z = [torch.randn(3, 4, dtype=torch.complex64), torch.randn(5, dtype=torch.complex64)]
    with record() as rec:
        torch._foreach_mul_(z, z)
        torch._foreach_copy_(z, [t.clone() for t in z])
        torch._foreach_zero_(z)
    assert (rec.total.flops, rec.total.uncounted) == (6 * 17, ())


def _fused_adamw(p: Tensor, g: Tensor, m: Tensor, v: Tensor, step: Tensor) -> Tensor:
    torch._fused_adamw_(
        [p], [g], [m], [v], [], [step], lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.01,
        eps=1e-8, amsgrad=False, maximize=False,
    )  # fmt: skip
    return p


def test_a_fused_step_counts_alike_on_meta() -> None:
    # AdamW: 11 per value and the decay's multiply
    cost = typedflops.estimate(_fused_adamw, A, A, A, A, Float[Tensor, ""], a=3, b=4)
    assert (cost.flops, str(cost.formula), cost.uncounted) == (12 * 12, "12*a*b", ())


def test_a_fused_step_given_found_inf_is_named_not_counted() -> None:
    # it runs or not by the value of found_inf: no count in the sizes
    p, g, m, v = (torch.randn(3, 4) for _ in range(4))
    with record() as rec:
        torch._fused_adam_(
            [p], [g], [m], [v], [], [torch.tensor(1.0)], lr=0.1, beta1=0.9, beta2=0.99,
            weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False,
            grad_scale=torch.tensor(1.0), found_inf=torch.tensor(0.0),
        )  # fmt: skip
    assert (rec.total.flops, rec.total.uncounted) == (0, ("_fused_adam_",))
