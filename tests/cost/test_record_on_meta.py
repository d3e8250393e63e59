"""One thing, one count, on meta: inside ``kernels_of(device)`` a ``record()`` of a call on
meta tensors and ``estimate()`` of the same call count the same kernels (FLOPs forward and
backward, matmul FLOPs, bytes, ops left uncounted), whatever made the call's device plain:
a module's weights, or, for a function or a module without weights, ``kernels_of`` alone.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

import typedflops
from typedflops import record
from typedflops.cost.engine.kernels import kernels_of

N = 2 * 3 * 8  # the elements normalised


def _counts(cost: typedflops.Cost) -> tuple[object, ...]:
    return (
        cost.flops,
        cost.backward_flops,
        cost.matmul_flops,
        cost.bytes_read,
        cost.bytes_written,
        cost.uncounted,
    )


def _recorded_on_meta(model: nn.Module, x_grad: bool) -> typedflops.Cost:
    x = torch.empty(2, 3, 8, device="meta", requires_grad=x_grad)
    with record() as rec:
        model(x)
    return rec.total


# CUDA's fused kernel (docs/costs.md): 4 FLOPs per element forward with a weight, 3 without;
# backward 8 per element for the input's gradient, 2 for the weight's. A CPU runs the
# decomposition: 210 forward (with the weight), its backward as autograd composes it.
@pytest.mark.parametrize(
    ("target", "x_grad", "w_grad", "forward", "backward"),
    [
        ("cuda", False, True, 4 * N, 2 * N),
        ("cuda", True, True, 4 * N, 8 * N + 2 * N),
        ("cuda", True, False, 4 * N, 8 * N),
        ("cuda", False, False, 4 * N, 0),
        ("cpu", False, True, 210, 2 * N),
        ("cpu", True, True, 210, 546),
        ("cpu", False, False, 210, 0),
    ],
)
def test_rms_norm_on_meta_is_counted_alike_by_record_and_estimate(
    target: str, x_grad: bool, w_grad: bool, forward: int, backward: int
) -> None:
    with torch.device("meta"):
        norm = nn.RMSNorm(8)
    norm.weight.requires_grad_(w_grad)
    with kernels_of(target):
        cost = typedflops.estimate(
            norm, Float[Tensor, "b s d"], grad=("x",) if x_grad else (), b=2, s=3, d=8
        )
        recorded = _recorded_on_meta(norm, x_grad)
    assert (cost.flops, cost.backward_flops) == (forward, backward)
    assert _counts(recorded) == _counts(cost)


class Unweighted(nn.Module):
    """RMS norm without a weight: a module with no tensor to say where it runs."""

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (8,))


def _rms_norm(x: Tensor, w: Tensor) -> Tensor:
    return F.rms_norm(x, (8,), w)


def test_a_module_without_weights_runs_as_kernels_of_says() -> None:
    """Its estimate costed a CPU's decomposition (162 FLOPs, 872 bytes read) inside
    kernels_of("cuda"), where the record on meta costs CUDA's fused kernel: 3 per element."""
    model = Unweighted()
    with kernels_of("cuda"):
        cost = typedflops.estimate(model, Float[Tensor, "b s d"], b=2, s=3, d=8)
        recorded = _recorded_on_meta(model, False)
    assert (cost.flops, cost.backward_flops) == (3 * N, 0)
    assert _counts(recorded) == _counts(cost)
    with kernels_of("cpu"):
        cpu = typedflops.estimate(model, Float[Tensor, "b s d"], b=2, s=3, d=8)
        recorded = _recorded_on_meta(model, False)
    assert cpu.flops == 162
    assert _counts(recorded) == _counts(cpu)


def test_a_function_runs_as_kernels_of_says() -> None:
    """A function given a weight on meta: CUDA's fused kernel (192 FLOPs, 224 bytes read,
    216 written; the estimate gave the CPU's 210, 872 and 648)."""
    w = torch.ones(8, device="meta", requires_grad=True)
    x = torch.empty(2, 3, 8, device="meta")
    for target, read in (("cuda", 224), ("cpu", 872)):
        with kernels_of(target):
            cost = typedflops.estimate(_rms_norm, Float[Tensor, "b s d"], w=w, b=2, s=3, d=8)
            with record() as rec:
                _rms_norm(x, w)
        assert cost.bytes_read == read
        assert _counts(rec.total) == _counts(cost)


def test_no_backward_is_predicted_under_no_grad_after_a_record_with_grad() -> None:
    """A custom op (the fused RMS norm's stand-in) runs with grad mode off inside its own
    autograd forward: its event kept from there said a backward was to come, and a later
    record under no_grad predicted it (96 FLOPs, the weight's gradient)."""
    with torch.device("meta"):
        norm = nn.RMSNorm(8)
    x = torch.empty(2, 3, 8, device="meta")
    found = []
    for grad in (True, False, True):
        with kernels_of("cuda"), torch.set_grad_enabled(grad), record() as rec:
            norm(x)
        found.append((rec.total.flops, rec.total.backward_flops))
    assert found == [(4 * N, 2 * N), (4 * N, 0), (4 * N, 2 * N)]


class Masked(nn.Module):
    """Attention with a boolean mask made inside (6 queries, 6 keys)."""

    def forward(self, x: Tensor) -> Tensor:
        mask = torch.ones(6, 6, dtype=torch.bool, device=x.device).tril()
        return F.scaled_dot_product_attention(x, x, x, attn_mask=mask)


def test_a_boolean_mask_is_made_additive_before_a_fused_attention_kernel() -> None:
    """Torch turns a boolean mask into an additive one in the inputs' dtype before the CPU's
    flash kernel and the memory-efficient kernel: two 4-byte scalars written, ``where``
    reading the 36-byte mask and both scalars and writing 144 bytes, which the kernel then
    reads in place of the boolean mask (+108). A CPU run records it; the estimate on meta
    passed the boolean mask on (1,572 bytes read and 1,728 written, short by 152 each)."""
    model = Masked()
    on_meta_x = torch.empty(2, 4, 6, 8, device="meta")
    with kernels_of("cpu"):
        cost = typedflops.estimate(model, Float[Tensor, "b h s d"], b=2, h=4, s=6, d=8)
        with record() as on_meta:
            model(on_meta_x)
    x = torch.randn(2, 4, 6, 8)
    with record() as real:
        model(x)
    attention = [op for op in cost.ops if op.op == "scaled_dot_product_attention"]
    assert [(op.bytes_read, op.bytes_written) for op in attention] == [(1724, 1880)]
    assert _counts(on_meta.total) == _counts(real.total) == _counts(cost)
    with kernels_of("cuda"):  # float32: the memory-efficient kernel, the same conversion
        gpu = typedflops.estimate(model, Float[Tensor, "b h s d"], b=2, h=4, s=6, d=8)
        with record() as gpu_meta:
            model(on_meta_x)
    assert _counts(gpu_meta.total) == _counts(gpu)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_record_counts_mm_and_addmm_alike_on_every_device(device: str) -> None:
    # mm of 4x8 by 8x16: 2·4·8·16 = 1,024 FLOPs, reading 4·8 + 8·16 floats and writing
    # 4·16; addmm adds a bias of 16 (read once more): 1,024 FLOPs as FlopCounterMode has it.
    # Keyed by their tensors, the second call of each is counted by the first's event.
    a, b = torch.ones(4, 8, device=device), torch.ones(8, 16, device=device)
    bias = torch.ones(16, device=device)
    with record() as rec:
        for _ in range(2):
            torch.mm(a, b)
            torch.addmm(bias, a, b)
    assert rec.total.flops == rec.total.matmul_flops == 4 * 1024
    assert rec.total.bytes_read == 4 * (2 * (4 * 8 + 8 * 16) + 2 * (16 + 4 * 8 + 8 * 16))
    assert rec.total.bytes_written == 4 * 4 * (4 * 16)


def test_a_record_on_meta_refuses_operands_of_two_dtypes_as_devices_do() -> None:
    # meta's kernel of mm takes them; every device refuses (see device_runs.RUNS)
    a = torch.ones(4, 8, device="meta")
    b = torch.ones(8, 16, device="meta", dtype=torch.float16)
    with (
        record(),
        pytest.raises(RuntimeError, match="mm: expected its operands to have the same dtype"),
    ):
        torch.mm(a, b)
    with pytest.raises(RuntimeError):  # (as a CPU refuses them, recorded or not)
        torch.mm(torch.ones(4, 8), torch.ones(8, 16, dtype=torch.float16))
