"""The peak of forward and backward found on ``meta`` against the CPU's allocator
(``torch.profiler``'s allocation events), on what the dispatcher does not show as it runs:
backward formulas that fill their zeros in place, matrix products that copy an input
inside their kernel, and models written as course code and nanoGPT write them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from real_models import NanoGPT, TransformerLM
from torch import Tensor

from typedflops import SpecError
from typedflops.config import disabled
from typedflops.memory import training_memory
from typedflops.planning.peak import LiveBytes
from typedflops.planning.training import measure_peak

#: autograd keeps ``scores / math.sqrt(d_k)``'s Python float as an 8-byte CPU tensor that
#: no op makes: one per attention layer.
SCALE = 8


def both_peaks(step: Callable[[], object]) -> tuple[int, int]:
    """The peak LiveBytes counts (run first, as training_memory runs on meta) and the
    profiler's, of the same step on the CPU."""
    tracker = LiveBytes()
    with tracker:
        step()
    return tracker.peak, measure_peak(step)


WEIGHT = torch.randn(1000, 64, requires_grad=True)
ROWS = torch.randint(0, 1000, (32,))

#: Lookups whose backward makes zeros and fills them: in place without a dispatch mode.
LOOKUPS: dict[str, Callable[[], Tensor]] = {
    "index": lambda: WEIGHT[ROWS],
    "index_select": lambda: WEIGHT.index_select(0, ROWS),
    "gather": lambda: torch.gather(WEIGHT, 0, ROWS[:, None].expand(32, 64)),
    "take": lambda: WEIGHT.take(ROWS),
    "embedding": lambda: torch.nn.functional.embedding(ROWS, WEIGHT),
}


@pytest.mark.parametrize("lookup", list(LOOKUPS))
def test_a_lookups_backward_fills_its_zeros_in_place(lookup: str) -> None:
    """The weight's gradient is made once (256000 bytes, plus the 8 of the sum and its
    gradient): a dispatch mode's out-of-place branch is not counted twice."""

    def step() -> None:
        LOOKUPS[lookup]().sum().backward()
        WEIGHT.grad = None

    counted, measured = both_peaks(step)
    if lookup == "embedding":  # the CPU's embedding_dense_backward sorts the rows aside
        assert measured - counted == 8192
    else:
        assert counted == measured == 1000 * 64 * 4 + 8


def layout(kind: str, batch: int, rows: int, cols: int) -> Tensor:
    """A (batch, rows, cols) tensor laid out as ``kind``."""
    if kind == "contiguous":
        return torch.randn(batch, rows, cols)
    if kind == "transposed":
        return torch.randn(batch, cols, rows).transpose(1, 2)
    if kind == "batch-broadcast":
        return torch.randn(1, rows, cols).expand(batch, rows, cols)
    if kind == "expanded scalar":  # the gradient of a sum
        return torch.ones(()).expand(batch, rows, cols)
    if kind == "column-broadcast":
        return torch.randn(batch, rows, 1).expand(batch, rows, cols)
    return torch.randn(batch, rows, 2 * cols)[..., ::2]  # every other column


#: Layouts and whether BLAS takes them as they are.
LAYOUTS = {
    "contiguous": True,
    "transposed": True,
    "batch-broadcast": True,
    "expanded scalar": False,
    "column-broadcast": False,
    "strided slice": False,
}


@pytest.mark.parametrize("kind", list(LAYOUTS))
def test_a_matrix_product_copies_an_input_blas_cannot_take(kind: str) -> None:
    """mm copies the whole matrix, the CPU's bmm one matrix of the batch at a time, while
    its result lives: LiveBytes counts the copy at its moment, as the profiler sees it."""
    weight = torch.randn(3, 500, 32)
    batched = layout(kind, 3, 64, 500)
    single = layout(kind, 1, 64, 500)[0]
    copy = 0 if LAYOUTS[kind] else 64 * 500 * 4
    for step, result in (
        (lambda: torch.bmm(batched, weight), 3 * 64 * 32 * 4),
        (lambda: torch.mm(single, weight[0]), 64 * 32 * 4),
    ):
        assert both_peaks(step) == (result + copy, result + copy)


def test_on_cuda_a_batched_product_copies_the_whole_input() -> None:
    """cuBLAS's batched product makes one contiguous copy of the whole input it cannot take
    (``prepare_batch_matrix_for_cublas``), where a CPU copies a matrix at a time."""
    grad = torch.ones((), device="meta").expand(3, 64, 500)
    weight = torch.empty(3, 500, 32, device="meta")
    counted = {}
    for device_type in ("cpu", "cuda"):
        tracker = LiveBytes(device_type)
        with tracker:
            torch.bmm(grad, weight)
        counted[device_type] = tracker.peak
    result = 3 * 64 * 32 * 4
    assert counted == {"cpu": result + 64 * 500 * 4, "cuda": result + 3 * 64 * 500 * 4}


@pytest.mark.parametrize(("batch", "seq", "scales"), [(1, 16, 0), (3, 64, 2), (2, 32, 2)])
def test_a_course_transformer_peak_is_the_cpus(batch: int, seq: int, scales: int) -> None:
    """The course's transformer (its own Linear by einsum, Embedding by indexing, softmax
    by hand, mask made in forward; forward returns logits): its forward and backward, the
    logits held through backward and their gradient an expanded one, peak as the
    profiler sees, but for the layers' kept scales where the peak falls in backward."""
    torch.manual_seed(0)
    model = TransformerLM(500, 64, 64, 2, 4, 128)
    ids = torch.randint(0, 500, (batch, seq))

    def step() -> None:
        out = model(ids)
        out.sum().backward()

    with disabled():
        step()
        model.zero_grad(set_to_none=True)
        measured = measure_peak(step)
    memory = training_memory(model, None, batch=batch, seq=seq)
    assert measured - memory.forward_backward == scales * SCALE


@pytest.mark.parametrize(("batch", "seq"), [(1, 16), (3, 64)])
def test_nanogpt_with_its_optional_targets_is_its_training_step(batch: int, seq: int) -> None:
    """``forward(idx, targets=None)`` returning ``(logits, loss)``: ``targets=True`` builds
    the Optional targets, backward starts from the loss in the tuple, and the peak is the
    CPU's to the byte. Without it the dry run is what ``model(idx)`` runs: the last
    position's logits, no loss, fewer FLOPs."""
    torch.manual_seed(0)
    model = NanoGPT(500, 64, 64, 2)
    idx = torch.randint(0, 500, (batch, seq))
    targets = torch.randint(0, 500, (batch, seq))

    def step() -> None:
        _, loss = model(idx, targets)
        assert loss is not None
        loss.backward()

    with disabled():
        step()
        model.zero_grad(set_to_none=True)
        measured = measure_peak(step)
    memory = training_memory(model, None, b=batch, t=seq, targets=True)
    assert memory.forward_backward == measured
    inference = model.forward.estimate(b=batch, t=seq)
    assert inference.flops < memory.cost.flops
    assert inference.matmul_flops == memory.cost.matmul_flops - 2 * batch * (seq - 1) * 64 * 500


def test_naming_a_tensor_parameter_in_estimate() -> None:
    """Only an Optional tensor defaulting to None can be asked for, and only with True."""
    model = NanoGPT(50, 16, 16, 1)
    with pytest.raises(SpecError) as info:
        model.forward.estimate(b=1, t=4, targets=1)
    assert str(info.value) == (
        "NanoGPT.forward.estimate(): targets=1 names a tensor parameter; targets=True builds "
        "it from its annotation instead of leaving it None"
    )
    with pytest.raises(SpecError) as info:
        model.forward.estimate(b=1, t=4, idx=True)
    assert str(info.value) == (
        "NanoGPT.forward.estimate(): idx=True names a tensor parameter; leave it out: "
        "estimate() builds it from its annotation"
    )
