"""Planning a training step: will it fit, and how long will it take (``typedflops plan``).

A named config (:data:`typedflops.nn.CONFIGS`) is built on ``meta`` and its loss dry-run at
the batch and sequence length asked: FLOPs (forward, backward, recomputation), memory
(parameters, gradients, optimizer state, master weights, activations) and their formulas,
the step's peak (allocation by allocation) and whether it fits the device's memory, and
the step's time on it.

The dry runs cost the kernels of the device planned for, on any machine
(:func:`typedflops.planning.kernels_of`): for a GPU, the attention kernel torch picks on its
compute capability (cuDNN's for 16-bit inputs on an H100, H200 or B200, where torch tries
it first; flash on an A100, L4 or RTX 4090) and CUDA's fused RMS norm, with their FLOPs
(FlopCounterMode's) and the tensors they save for backward. The plan's report and JSON are
:class:`~.plan_report.TrainingPlan`'s; its plot against the batch size is :mod:`.plan_plot`'s.
"""

from __future__ import annotations

import dataclasses

import torch

from .. import devices
from ..devices import DeviceSpec
from ..errors import SpecError
from ..nn import CONFIGS, TransformerConfig, TransformerLM
from .plan_report import TrainingPlan
from .steptime import step_time
from .training import PLANNED_DEVICE, optimizer_key, training_memory

__all__ = ["TrainingPlan", "plan"]


def plan(
    model: str | TransformerConfig,
    batch: int,
    seq: int,
    device: str | DeviceSpec = PLANNED_DEVICE,
    *,
    dtype: torch.dtype = torch.bfloat16,
    optimizer: str | None = "adamw",
    mfu: float = 0.4,
    checkpoint: bool = False,
    peak: float | None = None,
) -> TrainingPlan:
    """Plan one training step of ``model`` (a name of :data:`typedflops.nn.CONFIGS` or a
    config) at ``batch`` x ``seq`` on ``device`` (a device-table name); ``peak`` (FLOP/s)
    overrides the device's peak at ``dtype``. The dry runs cost the device's kernels.

    >>> step = plan("gpt2", batch=8, seq=1024, device="H100 SXM")
    >>> step.fits, step.memory.parameters.total
    (True, 124439808)
    """
    if isinstance(model, str):
        if model not in CONFIGS:
            raise SpecError.at(
                None, f"unknown model {model!r}", hint=f"known: {', '.join(CONFIGS)}"
            )
        name, config = model, CONFIGS[model]
    else:
        name, config = "custom", model
    for label, value in (("batch", batch), ("seq", seq)):
        if type(value) is not int or value < 1:
            raise SpecError.at("plan()", f"{label}={value!r} is not a size >= 1")
    if seq > config.context:
        raise SpecError.at("plan()", f"seq={seq} is longer than {name}'s context {config.context}")
    optimizer_key(optimizer, "plan()")
    if not 0.0 < mfu <= 1.0:
        raise SpecError.at("plan()", f"mfu={mfu!r} must be in (0, 1]")
    config = dataclasses.replace(config, checkpoint=checkpoint or config.checkpoint)
    spec = devices.resolve(device)
    with torch.device("meta"):
        lm = TransformerLM(config, dtype=dtype)
    # The kernels of the device planned for (the attention kernel torch picks on its
    # compute capability, CUDA's fused RMS norm), whatever machine plans it.
    memory = training_memory(lm, optimizer, dtype, kernels=spec, batch=batch, seq=seq)
    timing = step_time(
        memory.cost,
        spec,
        dtype,
        mfu=mfu,
        parameter_bytes=memory.bytes["parameters"],
        gradient_bytes=memory.bytes["gradients"],
        peak=peak,
    )
    return TrainingPlan(
        model=name,
        config=config,
        batch=batch,
        seq=seq,
        device=spec,
        memory=memory,
        time=timing,
        capacity=None if spec.memory is None else int(spec.memory),
        capacity_source=spec.memory_source or None,
    )
