"""Torch's own database of ops and their test inputs (``op_db``, the OpInfo samples its
test suite runs) as code nobody here wrote: for every sixth op, its first sample (float32
tensors whose leading input requires grad), a dry run (``estimate()`` on meta, sizes as
numbers) and ``record()`` of the real CPU run count one thing: the same FLOPs, predicted
backward, bytes read and written, and uncounted ops. A body whose result depends on values
(``nonzero``, ``unique``) is the one-line error that says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jaxtyping import Float
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_unflatten

from typedflops import SpecError, estimate, record

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db


def _sample(op: Any) -> tuple[Callable[..., Any], list[Tensor]] | None:
    """The op's first float32 sample as a function of its tensors, and the tensors; None
    where it has no such sample (integer or sparse inputs, 0-d tensors, more than four
    tensors) or a CPU refuses it."""
    try:
        sample = next(iter(op.sample_inputs("cpu", torch.float32, requires_grad=True)))
    except Exception:  # (an op without float32 samples)
        return None
    flat, spec = tree_flatten(((sample.input, *sample.args), sample.kwargs))
    places = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
    tensors = [flat[i] for i in places]
    if not tensors or len(tensors) > 4:
        return None
    if any(not t.is_floating_point() or t.dim() == 0 for t in tensors):
        return None
    if any(t.layout is not torch.strided for t in tensors):
        return None

    def call(*given: Tensor) -> Any:
        values = list(flat)
        for place, tensor in zip(places, given, strict=True):
            values[place] = tensor
        args, kwargs = tree_unflatten(values, spec)
        return op.op(*args, **kwargs)

    try:
        call(*tensors)
    except Exception:  # (a sample a CPU refuses: a GPU's, or torch's own error cases)
        return None
    return call, [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    OPS = [op for op in op_db[::6] if _sample(op) is not None]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("op", OPS, ids=[f"{op.name}.{op.variant_test_name}" for op in OPS])
def test_a_dry_run_counts_what_the_cpu_run_counts(op: Any) -> None:
    found = _sample(op)
    assert found is not None
    call, tensors = found
    with record() as rec:
        call(*tensors)

    specs = [Float[Tensor, " ".join(map(str, t.shape))] for t in tensors]
    # (the inputs of a function taking *args are named _input0, _input1...)
    grad = [f"_input{i}" for i, t in enumerate(tensors) if t.requires_grad]
    try:
        cost = estimate(call, *specs, grad=grad)
    except SpecError as error:
        assert "its result depends on the tensors' values" in str(error)
        return
    total = rec.total
    assert (cost.flops, cost.backward_flops, cost.bytes_read, cost.bytes_written) == (
        total.flops,
        total.backward_flops,
        total.bytes_read,
        total.bytes_written,
    )
    assert set(cost.uncounted) == set(total.uncounted)
