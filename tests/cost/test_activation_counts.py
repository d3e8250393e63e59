"""Kernels torch does not tag pointwise, counted by the conventions: an activation one op per
output element and its backward kernel one per gradient value (as relu's
``threshold_backward``), whichever of the two torch tags; ``addbmm`` as the matrix products
it sums; ops that compute nothing (a zero tensor of forward-mode AD, a check of a padding
mask) free, never listed as uncounted.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

import typedflops
from typedflops import record

Activation = Callable[[Tensor], Tensor]

ACTIVATIONS: dict[str, Activation] = {
    "leaky_relu": F.leaky_relu,
    "relu6 (hardtanh)": F.relu6,
    "elu": F.elu,
    "softplus": F.softplus,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "logsigmoid": F.logsigmoid,
    "softshrink": F.softshrink,
    "celu": F.celu,
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("shape", [(6, 10), (2, 3, 5)])
def test_an_activation_and_its_backward_cost_one_op_per_value(
    name: str, shape: tuple[int, ...]
) -> None:
    x = torch.randn(*shape, requires_grad=True)
    with record() as rec:
        ACTIVATIONS[name](x)
    values = x.numel()
    assert rec.total.uncounted == ()
    assert (rec.total.flops, rec.total.backward_flops) == (values, values)


def test_mish_backward_is_the_one_kernel_a_device_runs() -> None:
    # a CPU and a GPU run aten.mish_backward, one op a gradient value; torch runs its
    # decomposition on meta (9 ops a value), which a prediction replayed before. The
    # in-place form saves a copy of its input: the copy's backward is free
    def run(body: Activation, backward: bool) -> tuple[int, int, bool]:
        x = torch.randn(6, 10, requires_grad=True)
        with record() as rec:
            y = body(x * 1)
            if backward:
                y.sum().backward()
        return rec.total.flops, rec.total.backward_flops, rec.total.exact

    for body in (F.mish, nn.Mish(), lambda x: F.mish(x, inplace=True)):
        predicted, ran = run(body, False), run(body, True)
        assert predicted == (60 + 60, 60 + 60, True)  # the multiply and mish; their backward
        assert ran == (60 + 60 + 60, 60 + 60, True)  # and the sum
    cost = typedflops.estimate(nn.Mish(), Float[Tensor, "b n"], grad=("input",), b=6, n=10)
    assert (cost.flops, cost.backward_flops, str(cost.backward_formula)) == (60, 60, "b*n")


def test_prelu_counts_both_gradients_of_its_backward_kernel() -> None:
    x = torch.randn(6, 10, requires_grad=True)
    weight = torch.full((1,), 0.25, requires_grad=True)
    with record() as rec:
        F.prelu(x, weight)
    # the input's and the weight's gradient (60 values each), the weight's summed (60 adds)
    assert (rec.total.flops, rec.total.backward_flops, rec.total.uncounted) == (60, 180, ())


@pytest.mark.parametrize(("b", "m", "k", "n"), [(4, 3, 5, 2), (1, 7, 2, 3)])
def test_addbmm_is_the_matrix_products_it_sums(b: int, m: int, k: int, n: int) -> None:
    batch1 = torch.randn(b, m, k, requires_grad=True)
    batch2 = torch.randn(b, k, n, requires_grad=True)
    with record() as rec:
        torch.addbmm(torch.zeros(m, n), batch1, batch2)
    products = 2 * b * m * k * n
    assert (rec.total.flops, rec.total.matmul_flops, rec.total.uncounted) == (
        products,
        products,
        (),
    )
    # its backward is the two batched products FlopCounterMode counts (it leaves the
    # forward at 0)
    with FlopCounterMode(display=False) as counter:
        torch.addbmm(torch.zeros(m, n), batch1, batch2).sum().backward()
    assert rec.total.backward_flops == counter.get_total_flops() == 2 * products


def test_forward_mode_ad_lists_no_op_that_computes_nothing() -> None:
    w = torch.randn(16, 32)
    x, tangent = torch.randn(8, 16), torch.ones(8, 16)
    with record() as rec:
        torch.func.jvp(lambda a: a @ w, (x,), (tangent,))
    with FlopCounterMode(display=False) as counter:
        torch.func.jvp(lambda a: a @ w, (x,), (tangent,))
    assert rec.total.uncounted == ()
    # the product, its tangent's two (one with w's zero tangent) and their sum
    assert rec.total.matmul_flops == counter.get_total_flops() == 3 * (2 * 8 * 16 * 32)
    assert rec.total.flops == rec.total.matmul_flops + 8 * 32


def test_a_padding_mask_check_is_free() -> None:
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
    encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=True).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    with torch.no_grad(), record() as rec:
        encoder(x, src_key_padding_mask=mask)
    assert rec.total.uncounted == ()


def _meta_tensors() -> int:
    gc.collect()
    with warnings.catch_warnings():  # (a deprecated torch.distributed alias, walked past)
        warnings.simplefilter("ignore", FutureWarning)
        return sum(
            1 for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.device.type == "meta"
        )


def test_a_dry_run_leaves_no_tensor_alive() -> None:
    """What autograd keeps for backward is noted, not held: a dry run's graph (its saved
    outputs hold their own grad_fn otherwise, a cycle through autograd that no garbage
    collection frees) goes when the run does, so estimates repeated hold no more memory."""
    # (relu keeps its output for backward)
    blocks = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(6)])
    spec = Float[Tensor, "batch 8"]
    cost = typedflops.estimate(blocks, spec, batch=4)
    before = _meta_tensors()
    for _ in range(3):
        again = typedflops.estimate(blocks, spec, batch=4)
        assert again.activation_bytes == cost.activation_bytes > 0
    assert _meta_tensors() == before


SCALED: list[tuple[str, Callable[[Tensor], Tensor], int]] = [
    ("add", lambda x: torch.add(x, x), 1),
    ("add, alpha 2", lambda x: torch.add(x, x, alpha=2), 2),
    ("add, alpha 1.0", lambda x: torch.add(x, x, alpha=1.0), 1),
    ("sub of a number, alpha 3", lambda x: torch.sub(x, 1, alpha=3), 2),
    ("add_ in place, alpha 0.5", lambda x: x.clone().add_(x, alpha=0.5), 2),
    ("rsub", lambda x: torch.rsub(x, x), 1),  # (not tagged pointwise by torch)
    ("rsub, alpha 2", lambda x: torch.rsub(x, x, alpha=2), 2),
]


@pytest.mark.parametrize(("body", "per_value"), [c[1:] for c in SCALED], ids=[c[0] for c in SCALED])
def test_an_add_that_scales_its_second_operand_counts_the_multiply(
    body: Callable[[Tensor], Tensor], per_value: int
) -> None:
    x = torch.randn(4, 6)
    with record() as rec:
        body(x)
    assert (rec.total.flops, rec.total.uncounted) == (per_value * 24, ())
    cost = typedflops.estimate(body, Float[Tensor, "a b"], a=4, b=6)
    dims = {symbol.name: symbol for symbol in cost.formula.free_symbols}
    assert (cost.flops, cost.exact) == (per_value * 24, True)
    assert cost.formula == per_value * dims["a"] * dims["b"]


def test_a_complex_alpha_scales_in_complex_flops() -> None:
    z = torch.ones(3, dtype=torch.complex64)
    with record() as real_alpha:
        torch.add(z, z, alpha=2)  # an add 2, a complex value by a real 2
    with record() as complex_alpha:
        torch.add(z, z, alpha=1j)  # an add 2, a complex product 6
    assert (real_alpha.total.flops, complex_alpha.total.flops) == (3 * 4, 3 * 8)
