"""The attention kernel a dry run assumes for a GPU it has not got, against what torch
picked on one: torch 2.11.0+cu130 (cuDNN 9.19) on an NVIDIA H200 (sm90), and the filters
and priority order of torch's sdp_utils.cpp for other GPUs and calls."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel

from typedflops.cost.engine import kernels
from typedflops.cost.engine.attention_choice import (
    CUDNN,
    EFFICIENT,
    FLASH,
    MATH,
    AttentionCall,
    gpu_choice,
    priority_order,
)
from typedflops.devices import resolve
from typedflops.devices.gpus import GPU_TABLE

ON = (True, True, True, True)

# torch._fused_sdp_choice on an H200 (torch 2.11.0+cu130): query (1, 4, 8, d_q), key and
# value (1, 4, 8, d) or, grouped (enable_gqa=True), (1, 2, 8, d); a float (8, 8) mask in
# the inputs' dtype. Columns: no mask, no mask grouped, mask, mask grouped.
# 3 cuDNN, 1 flash, 2 memory-efficient, 0 math.
H200_SEEN = """
float16   64 64 64     3 3 3 3
float16   128 128 128  3 3 3 3
float16   256 256 256  3 3 3 3
float16   512 512 512  2 0 2 0
float16   62 62 62     1 1 0 0
float16   64 64 32     3 3 3 3
float16   80 80 80     3 3 3 3
bfloat16  64 64 64     3 3 3 3
bfloat16  128 128 128  3 3 3 3
bfloat16  256 256 256  3 3 3 3
bfloat16  512 512 512  2 0 2 0
bfloat16  62 62 62     1 1 0 0
bfloat16  64 64 32     3 3 3 3
bfloat16  80 80 80     3 3 3 3
float32   64 64 64     2 0 2 0
float32   128 128 128  2 0 2 0
float32   256 256 256  2 0 2 0
float32   512 512 512  2 0 2 0
float32   62 62 62     0 0 0 0
float32   64 64 32     2 0 2 0
float32   80 80 80     2 0 2 0
float64   64 64 64     0 0 0 0
float64   128 128 128  0 0 0 0
float64   256 256 256  0 0 0 0
float64   512 512 512  0 0 0 0
float64   62 62 62     0 0 0 0
float64   64 64 32     0 0 0 0
float64   80 80 80     0 0 0 0
"""


# A later run on the H200 (the same torch and cuDNN): two more head sizes; and every row,
# these and the ones above, with query, key and value requiring grad (training) gave the
# same answers as without.
H200_MORE = """
float16   160 160 160  3 3 3 3
float16   192 192 128  3 3 3 3
bfloat16  160 160 160  3 3 3 3
bfloat16  192 192 128  3 3 3 3
float32   160 160 160  2 0 2 0
float32   192 192 128  2 0 2 0
float64   160 160 160  0 0 0 0
float64   192 192 128  0 0 0 0
"""


def _seen(table: str = H200_SEEN) -> list[tuple[AttentionCall, int]]:
    cases = []
    for line in table.strip().splitlines():
        name, *numbers = line.split()
        dtype = getattr(torch, name)
        q, k, v, *answers = (int(n) for n in numbers)
        for (masked, grouped), answer in zip(
            ((False, False), (False, True), (True, False), (True, True)), answers, strict=True
        ):
            call = AttentionCall(dtype, (q, k, v), dtype if masked else None, grouped=grouped)
            cases.append((call, answer))
    return cases


SEEN = _seen()


def test_every_case_seen_on_an_h200_comes_out_as_torch_picked_it() -> None:
    """All 112 calls of the H200 run: cuDNN for 16-bit inputs with head sizes multiples of
    8 up to 256, masked or grouped or not; flash, memory-efficient or math otherwise."""
    assert len(SEEN) == 112
    for gpu in ((9, 0), resolve("H200 SXM").capability, resolve("H100 SXM").capability):
        found = [(call, gpu_choice(call, ON, gpu)) for call, _ in SEEN]
        assert found == SEEN
    assert sum(answer == CUDNN for _, answer in SEEN) == 40


def test_in_training_the_h200_picked_the_same_and_cudnn_up_to_256() -> None:
    """The 288 calls of the later run (9 head sizes, with and without grad): cuDNN for
    16-bit inputs in training too, head sizes 160 and 192/128 included."""
    cases = SEEN + _seen(H200_MORE)
    both = [
        (dataclasses.replace(call, grad=grad), seen)
        for call, seen in cases
        for grad in (False, True)
    ]
    assert len(both) == 288
    assert [(call, gpu_choice(call, ON, (9, 0))) for call, _ in both] == both


def test_before_sm90_the_same_calls_keep_flash_first() -> None:
    """On an A100, L4, RTX 3090 or RTX 4090 (and a GPU of unknown capability, taken as an
    A100) torch's order is flash, memory-efficient, math: where the H200 took cuDNN,
    flash without a mask for equal head sizes, else memory-efficient, or math when grouped
    (which memory-efficient refuses). Every other answer is the H200's."""
    for gpu in ((8, 0), (8, 6), (8, 9), None):
        for call, seen in SEEN:
            expected = seen
            if seen == CUDNN:
                equal = len(set(call.heads)) == 1
                expected = MATH if call.grouped else EFFICIENT
                if call.mask is None and equal:
                    expected = FLASH
            assert gpu_choice(call, ON, gpu) == expected, (call, gpu)


def _call(**changes: object) -> AttentionCall:
    fields: dict[str, object] = {"dtype": torch.bfloat16, "heads": (64, 64, 64), **changes}
    return AttentionCall(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "gpu", "expected"),
    [
        # cuDNN's head sizes: up to 256 on sm90 (in training too, as the H200 picked),
        # 128 on sm100 but for 192 with values of 128
        (_call(heads=(160, 160, 160)), (9, 0), CUDNN),
        (_call(heads=(160, 160, 160), grad=True, mask=torch.bfloat16), (9, 0), CUDNN),
        (_call(heads=(192, 192, 128), grad=True), (9, 0), CUDNN),
        (_call(heads=(256, 256, 256), grad=True), (10, 0), FLASH),
        (_call(heads=(192, 192, 128), grad=True), (10, 0), CUDNN),
        (_call(heads=(160, 160, 160), mask=torch.bfloat16), (10, 0), EFFICIENT),
        (_call(heads=(72, 72, 72), grad=True), (9, 0), CUDNN),
        (_call(heads=(200, 200, 200), mask=torch.bool), (9, 0), CUDNN),
        (_call(heads=(200, 200, 200), mask=torch.bool), (8, 0), EFFICIENT),
        # flash in training on sm86-89 and sm120: head sizes up to 192, or over 224
        # without dropout
        (_call(heads=(200, 200, 200), grad=True), (8, 9), EFFICIENT),
        (_call(heads=(256, 256, 256), grad=True), (12, 0), FLASH),
        (_call(heads=(256, 256, 256), grad=True, dropout=0.25), (8, 6), EFFICIENT),
        (_call(heads=(256, 256, 256), grad=True), (8, 0), FLASH),
        # cuDNN's dropout comes in sixteenths
        (_call(dropout=0.1), (9, 0), FLASH),
        (_call(dropout=0.125), (9, 0), CUDNN),
        # lengths: a key of length 1 (cuDNN refuses), causal with a longer key (flash does)
        (_call(lengths=(2, 1)), (9, 0), FLASH),
        (_call(lengths=(1, 2)), (9, 0), CUDNN),
        (_call(lengths=(1, 2), dropout=0.25), (9, 0), FLASH),
        (_call(lengths=(2, 3), causal=True), (8, 0), EFFICIENT),
        (_call(lengths=(2, 3), causal=True, grouped=True), (8, 0), MATH),
        (_call(lengths=(2, 3), causal=True, grouped=True), (9, 0), CUDNN),
        # a mask cuDNN does not take (3-D, or needing a gradient)
        (_call(mask=torch.bfloat16, mask_fits=False), (9, 0), EFFICIENT),
        (_call(mask=torch.bfloat16, mask_fits=False, grouped=True), (9, 0), MATH),
        # Volta and Turing: no flash, no cuDNN; memory-efficient without bfloat16, and
        # float32 head sizes of any alignment
        (_call(dtype=torch.float16), (7, 5), EFFICIENT),
        (_call(dtype=torch.float16, heads=(60, 60, 60)), (7, 0), MATH),
        (_call(dtype=torch.float32, heads=(62, 62, 62)), (7, 5), EFFICIENT),
        (_call(), (7, 5), MATH),
        # Blackwell: B200 (sm100) like Hopper, RTX 5090 (sm120) flash first
        (_call(), (10, 0), CUDNN),
        (_call(), (12, 0), FLASH),
    ],
)
def test_torchs_filters_on_each_gpu(
    call: AttentionCall, gpu: tuple[int, int], expected: int
) -> None:
    assert gpu_choice(call, ON, gpu) == expected


def test_switches_determinism_and_an_order_the_user_sets() -> None:
    """A backend switched off (sdpa_kernel) is passed over; deterministic algorithms keep
    cuDNN out; TORCH_CUDNN_SDPA_DEPRIORITIZED=1 puts it back last on sm90; an order set
    with sdpa_kernel(set_priority=True) is followed on any GPU."""
    call = _call()
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
        assert gpu_choice(call, kernels._flags(), (9, 0)) == FLASH
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        assert gpu_choice(call, kernels._flags(), (8, 0)) == CUDNN
        assert gpu_choice(call, kernels._flags(), (7, 5)) == MATH  # none: torch refuses
    torch.use_deterministic_algorithms(True)
    try:
        assert gpu_choice(call, ON, (9, 0)) == FLASH
    finally:
        torch.use_deterministic_algorithms(False)
    os.environ["TORCH_CUDNN_SDPA_DEPRIORITIZED"] = "1"
    try:
        assert priority_order((9, 0)) == (FLASH, EFFICIENT, MATH, CUDNN)
        assert gpu_choice(call, ON, (9, 0)) == FLASH
    finally:
        del os.environ["TORCH_CUDNN_SDPA_DEPRIORITIZED"]
    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]
    with sdpa_kernel(order, set_priority=True):
        assert priority_order((8, 0))[:3] == (CUDNN, FLASH, MATH)
        assert gpu_choice(call, kernels._flags(), (8, 0)) == CUDNN
    assert priority_order((8, 0)) == (FLASH, EFFICIENT, MATH, CUDNN)


CALLS = st.builds(
    AttentionCall,
    dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
    heads=st.tuples(*[st.sampled_from([8, 62, 64, 72, 128, 160, 192, 200, 256, 512])] * 3),
    mask=st.sampled_from([None, torch.bool, torch.bfloat16]),
    mask_fits=st.booleans(),
    grouped=st.booleans(),
    causal=st.booleans(),
    dropout=st.sampled_from([0.0, 0.1, 0.25]),
    grad=st.booleans(),
    lengths=st.sampled_from([(2, 2), (1, 2), (2, 1), (2, 3), (3, 2)]),
)


@given(CALLS)
def test_hopper_puts_cudnn_in_front_of_amperes_order(call: AttentionCall) -> None:
    """Flash and memory-efficient filter sm90 as sm80: an H100's answer is cuDNN or the
    A100's; cuDNN never comes first before sm90; an unknown GPU is an A100."""
    hopper, ampere = gpu_choice(call, ON, (9, 0)), gpu_choice(call, ON, (8, 0))
    assert hopper in (CUDNN, ampere)
    assert ampere != CUDNN
    assert gpu_choice(call, ON, None) == ampere


def test_the_call_as_the_filters_read_it() -> None:
    """From the arguments of a call: the mask's shape (2-D or 4-D broadcasting, no
    gradient), grouped heads only with enable_gqa, gradients with grad mode on, lengths."""
    half = torch.bfloat16
    q = torch.empty(2, 8, 128, 64, device="meta", dtype=half, requires_grad=True)
    k = torch.empty(2, 2, 512, 64, device="meta", dtype=half)

    def summary(**kwargs: object) -> AttentionCall | None:
        return kernels._summary(kernels._arguments((q, k, k), kwargs))

    plain = summary(enable_gqa=True)
    assert plain == AttentionCall(
        torch.bfloat16, (64, 64, 64), grouped=True, grad=True, lengths=(2, 3)
    )
    assert summary() is None  # 8 query heads, 2 key heads, no enable_gqa: no fused kernel
    for shape, fits in (
        ((128, 512), True),
        ((1, 512), True),
        ((2, 1, 128, 512), True),
        ((1, 8, 1, 512), True),
        ((2, 128, 512), False),
        ((2, 4, 128, 512), False),
    ):
        mask = torch.empty(shape, device="meta", dtype=torch.bool)
        found = summary(attn_mask=mask, enable_gqa=True)
        assert found is not None and (found.mask, found.mask_fits) == (torch.bool, fits), shape
    bias = torch.empty(128, 512, device="meta", dtype=half, requires_grad=True)
    learned = summary(attn_mask=bias, enable_gqa=True)
    assert learned is not None and not learned.mask_fits
    with torch.no_grad():
        assert summary(enable_gqa=True) == AttentionCall(
            torch.bfloat16, (64, 64, 64), grouped=True, lengths=(2, 3)
        )


def test_every_nvidia_gpu_of_the_table_has_its_compute_capability() -> None:
    """Each NVIDIA record carries the capability NVIDIA lists for it; AMD's carry none."""
    expected = {
        "h100": (9, 0),
        "h200": (9, 0),
        "b200": (10, 0),
        "a100": (8, 0),
        "a10": (8, 6),
        "a10g": (8, 6),
        "3090": (8, 6),
        "l4": (8, 9),
        "l40": (8, 9),
        "l40s": (8, 9),
        "4090": (8, 9),
        "t4": (7, 5),
        "v100": (7, 0),
        "5090": (12, 0),
    }
    for record in GPU_TABLE:
        assert record.capability == expected.get(record.model), record.sku
    assert resolve("A100 SXM").capability == (8, 0)
    assert resolve("NVIDIA GeForce RTX 5090").capability == (12, 0)
