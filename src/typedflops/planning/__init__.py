"""One training step, planned before it runs: FLOPs, memory, whether it fits, and its time.

- ``plan(model, batch, seq, device)``: a named config of :data:`typedflops.nn.CONFIGS` (or a
  ``TransformerConfig``) on a device of the table, as ``typedflops plan`` prints it.
- ``training_memory(model, optimizer, dtype, **dims)``: parameters, gradients, optimizer
  state, master weights, activations and the peak of any ``@typed_flops`` model.
- ``step_time(cost, device, dtype, mfu=)``: a step's roofline bound and its time at an MFU;
  ``step_mfu(cost, seconds, device, dtype)``: the MFU of a measured step (PaLM's model
  FLOPs, recomputation not credited).
- ``kernels_of("H100 SXM")``: inside it, dry runs on ``meta`` cost the kernels that GPU runs
  (the attention kernel torch picks on its compute capability, CUDA's fused RMS norm) on any
  machine.
- ``plan_parallel(model, batch, seq, device, ParallelLayout(dp=, zero=, tp=, sp=, pp=,
  microbatches=))``: the same per rank, the model split by torch's own sharding under a
  fake process group; ``zero_states()``: ZeRO's closed forms.

>>> import torch
>>> step = plan("gpt2", batch=8, seq=1024, device="H100 SXM")
>>> step.fits, step.memory.peak < 80e9, step.time.bound
(True, True, 'compute')
>>> cost = step.memory.cost  # the step's forward and backward, in the model's dims
>>> round(step_mfu(cost, 0.0382, "H100 SXM", torch.bfloat16), 3)  # a measured 38.2 ms step
0.185
"""

from __future__ import annotations

from ..cost.engine.kernels import kernels_of
from .figure import Figure
from .layout import ParallelLayout
from .planner import TrainingPlan, plan
from .ranks import ParallelPlan, plan_parallel
from .steptime import StepTime, least_traffic, model_flops, step_mfu, step_time
from .training import TrainingMemory, training_memory
from .zero import ZeroStates, zero_states

__all__ = [
    "Figure",
    "ParallelLayout",
    "ParallelPlan",
    "StepTime",
    "TrainingMemory",
    "TrainingPlan",
    "ZeroStates",
    "kernels_of",
    "least_traffic",
    "model_flops",
    "plan",
    "plan_parallel",
    "step_mfu",
    "step_time",
    "training_memory",
    "zero_states",
]
