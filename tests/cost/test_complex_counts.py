"""Complex values counted in real FLOPs: an add 2, a multiply 6 (four products, an add and a
subtract), a divide 11, a multiply-add of a matrix product 8; other functions once per part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from jaxtyping import Complex, Float, Float32, Int
from kernel_counts import on_cpu, on_meta, recorded
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from typedflops import SpecError, estimate, record

N = 12  # 4 x 3 values
Z = Complex[Tensor, "a b"]
SIZES = {"a": 4, "b": 3}


CASES: list[tuple[str, Any, int]] = [
    ("add", lambda z: z + z, 2 * N),
    ("multiply", lambda z: z * z, 6 * N),
    ("multiply-by-a-real", lambda z: z * 2.0, 6 * N),  # torch computes it at the complex dtype
    ("divide", lambda z: z / (z + 1), 2 * N + 11 * N),
    ("multiply-in-place", lambda z: z.clone().mul_(z), 6 * N),
    ("addcmul", lambda z: torch.addcmul(z, z, z), 14 * N),
    ("abs", lambda z: z.abs(), 4 * N),  # two squares, an add, a root
    ("exp", lambda z: z.exp(), 2 * N),  # a function: once per part
    ("sum", lambda z: z.sum(), 2 * N),
    ("mean", lambda z: z.mean(0), 2 * N + 2 * 3),  # a complex divide by a real per output
    ("prod", lambda z: z.prod(), 6 * N),
    ("norm", lambda z: torch.linalg.vector_norm(z), 4 * N + 1),
    ("matmul", lambda z: z @ z.mT, 8 * 4 * 3 * 4),  # 4 x 4 outputs of 3 multiply-adds
    ("dot", lambda z: torch.dot(z[0], z[1]), 8 * 3),
]


@pytest.mark.parametrize(("body", "forward"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_complex_arithmetic_is_counted_in_real_flops(body: Any, forward: int) -> None:
    for counts in (
        on_cpu(body, [Z], SIZES, dtype=torch.complex64),
        on_meta(body, [Z], SIZES, dtype=torch.complex64),
    ):
        assert (counts.forward, counts.uncounted) == (forward, ())


def test_a_complex_convolution_is_the_three_real_ones_torch_runs() -> None:
    # Gauss's trick: 3 real convolutions of N = 1·3·4·4·2·9 = 864 multiply-adds; the adds of
    # the inputs' parts (72, 54), three subtracts of the 48 outputs, the imaginary part
    # times 1j (a real value by a complex scalar, run at the complex dtype: 6 per value), and
    # the complex result's add (2 per value)
    def body(x: Tensor) -> Tensor:
        w = torch.ones(3, 2, 3, 3, dtype=x.dtype)
        return torch.nn.functional.conv2d(x, w)

    sizes = {"n": 1, "c": 2, "h": 6, "w": 6}
    image = [Complex[Tensor, "n c h w"]]
    cpu = on_cpu(body, image, sizes, dtype=torch.complex64)
    assert cpu.forward == 3 * 2 * 864 + 72 + 54 + 3 * 48 + 6 * 48 + 2 * 48
    assert on_meta(body, image, sizes, dtype=torch.complex64) == cpu
    y = torch.randn(2, 3, 4, dtype=torch.complex64)
    z = torch.randn(2, 4, 5, dtype=torch.complex64)
    assert recorded(lambda: torch.addbmm(torch.zeros(3, 5, dtype=y.dtype), y, z)).forward == (
        8 * 2 * 3 * 4 * 5
    )


def test_a_complex_products_backward_is_complex_too() -> None:
    # d(z·w) = g·conj(w) and g·conj(z): two complex products (the conjugates are views)
    z = torch.randn(4, 3, dtype=torch.complex64, requires_grad=True)
    w = torch.randn(4, 3, dtype=torch.complex64, requires_grad=True)
    assert recorded(lambda: z * w).backward == 2 * 6 * N
    # estimate() gives complex inputs named in grad= their gradients too
    two = [Z, Z]
    assert on_meta(lambda z, w: z * w, two, SIZES, dtype=torch.complex64).backward == 2 * 6 * N


def test_complex_gradients_that_meet_are_summed_by_parts() -> None:
    # z read by two products: their backward 6 per value each (a complex product by a
    # number), and the sum of z's two gradients, 2 per value (one add per part; was 1)
    expected = 2 * 6 * N + 2 * N
    z = torch.randn(4, 3, dtype=torch.complex128, requires_grad=True)
    assert recorded(lambda: z * 2 + z * 3).backward == expected
    assert on_meta(lambda z: z * 2 + z * 3, [Z], SIZES, dtype=torch.complex128).backward == expected
    with record() as rec:
        (z * 2 + z * 3).real.sum().backward()
    assert (rec.total.backward_flops, rec.total.backward.exact) == (expected, True)


def test_real_values_keep_their_counts_and_a_fused_op_in_place_counts_its_parts() -> None:
    x = torch.randn(4, 3)
    assert recorded(lambda: x * x).forward == N
    assert recorded(lambda: x @ x.mT).forward == 2 * 4 * 3 * 4
    # addcmul_ (an optimizer's step) is addcmul's 2 per element, in place or not
    assert recorded(lambda: x.clone().addcmul_(x, x)).forward == 2 * N


def test_flop_counter_mode_counts_a_complex_product_as_a_real_one() -> None:
    # where typedflops departs: FlopCounterMode's 2·m·n·k whatever the dtype
    z = torch.randn(4, 3, dtype=torch.complex64)
    with FlopCounterMode(display=False) as counter:
        z @ z.mT
    assert counter.get_total_flops() == 2 * 4 * 3 * 4


def test_estimate_builds_complex_inputs_at_complex64_and_refuses_a_dtype_they_cannot_take() -> None:
    def product(z: Tensor, w: Tensor) -> Tensor:
        return z @ w

    a, b = Complex[Tensor, "m k"], Complex[Tensor, "k n"]
    cost = estimate(product, a, b, m=3, k=4, n=2)
    assert cost.flops == 8 * 3 * 4 * 2  # 4 times the real count
    assert cost.bytes_read == (3 * 4 + 4 * 2) * 8  # complex64, torch's default complex dtype
    real = Float[Tensor, "m k"], Float[Tensor, "k n"]
    with pytest.raises(SpecError, match=r"dtype=complex64 does not fit z's annotation"):
        estimate(product, *real, dtype=torch.complex64, m=3, k=4, n=2)  # was float32: 48 FLOPs
    with pytest.raises(SpecError, match=r"dtype=bfloat16 does not fit z's annotation"):
        estimate(product, Float32[Tensor, "m k"], b, dtype=torch.bfloat16, m=3, k=4, n=2)
    # ids stay integers under a floating dtype
    lookup = estimate(nn.Embedding(5, 4), Int[Tensor, "n"], dtype=torch.bfloat16, n=3)
    assert lookup.bytes_written == 3 * 4 * 2


@pytest.mark.parametrize(
    ("body", "backward"),
    [
        # a multiply of complex values 6, its backward a multiply (and a conjugate) per operand
        (lambda a, b: a * b, 288),
        # torch copies the conjugate view below autograd before the multiply: the same backward
        (lambda a, b: a * b.conj(), 288),
        # and b's two gradients summed (2 a value), the second product's one operand's 144
        (lambda a, b: a * b.conj() + b.conj() * 2, 480),
    ],
    ids=["product", "conjugate view", "conjugate view read twice"],
)
def test_a_conjugate_views_backward_is_predicted_as_it_runs(
    body: Callable[[Tensor, Tensor], Tensor], backward: int
) -> None:
    a = torch.randn(4, 6, dtype=torch.complex64, requires_grad=True)
    b = torch.randn(4, 6, dtype=torch.complex64, requires_grad=True)
    with record() as predicted:
        body(a, b)
    with record() as ran:
        out = body(a, b)
        out.backward(torch.ones_like(out))
    assert predicted.total.backward_flops == ran.total.backward_flops == backward
    assert ran.total.exact
    cost = estimate(body, Complex[Tensor, "4 6"], Complex[Tensor, "4 6"], grad=["a", "b"])
    assert cost.backward_flops == backward and cost.exact
