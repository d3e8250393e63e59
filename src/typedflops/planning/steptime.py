"""How long a training step takes on a device: a roofline bound, a prediction at an MFU, and
the MFU of a measured step.

Model FLOPs follow PaLM (Chowdhery et al. 2022, Appendix B): the matrix products of the
forward and of the backward (twice the forward's), without recomputation, so that a model
checkpointing its activations is not credited for the work it repeats. For a transformer
this is ``6*N + 12*L*H*Q*T`` per token (PaLM's notation), and here
``palm_model_flops(Cost.matmul_flops)`` (:mod:`typedflops.cost.types`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import devices
from ..cost.types import Cost, palm_model_flops
from ..devices import DeviceSpec
from ..errors import SpecError
from ..text import dtype_name

__all__ = ["BACKWARD_TRAFFIC", "StepTime", "least_traffic", "model_flops", "step_mfu", "step_time"]

#: Bytes a step's ops move unfused, as a multiple of its forward's: the backward reads and
#: writes about twice what the forward did (gradients of the inputs and of the weights).
BACKWARD_TRAFFIC = 2


def least_traffic(cost: Cost, parameter_bytes: int = 0, gradient_bytes: int = 0) -> int:
    """The bytes a training step must move between memory and the chip however its ops
    are fused: the parameters read by forward and again by backward, their gradients
    written once, and each activation saved for backward written once and read back once
    (``2 * cost.activation_bytes``). What an op makes and the next consumes at once need
    never reach memory, so the rest of each op's traffic is not counted.

    >>> from typedflops.nn import Linear
    >>> layer = Linear(256, 64)
    >>> cost = layer.estimate(batch=1024)
    >>> weights = 4 * (256 * 64 + 64)
    >>> least_traffic(cost, weights, weights) == 3 * weights + 2 * cost.activation_bytes
    True
    """
    return 2 * parameter_bytes + gradient_bytes + 2 * cost.activation_bytes


def model_flops(cost: Cost) -> int:
    """A training step's model FLOPs (PaLM's definition): 3x the forward's matrix products.

    >>> from typedflops.nn import Linear
    >>> model_flops(Linear(256, 64).estimate(batch=1024)) == 3 * 2 * 1024 * 256 * 64
    True
    """
    return palm_model_flops(cost.matmul_flops)


@dataclass(frozen=True)
class StepTime:
    """The predicted time of one training step on ``device`` at ``dtype``.

    ``step_flops`` is what runs (forward, backward and recomputation), ``model_flops``
    PaLM's count; ``step_bytes`` the traffic no fusion avoids (:func:`least_traffic`) and
    ``unfused_bytes`` what the ops move run one by one (each op's reads and writes in the
    forward, and :data:`BACKWARD_TRAFFIC` times that for the backward); ``roofline_seconds``
    is a lower bound (``step_flops`` at the promised peak, or ``step_bytes`` at the memory
    bandwidth, whichever takes longer); ``seconds`` is ``model_flops`` at ``mfu`` times the
    peak.
    """

    device: str
    dtype: torch.dtype
    peak_flop_per_sec: float
    bandwidth: float | None
    step_flops: int
    model_flops: int
    step_bytes: int
    roofline_seconds: float
    mfu: float
    seconds: float
    unfused_bytes: int = 0

    @property
    def bound(self) -> str:
        """Which roof the bound hits: ``"compute"`` or ``"memory"``."""
        compute = self.step_flops / self.peak_flop_per_sec
        return "compute" if compute >= self.roofline_seconds else "memory"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "device": self.device,
            "dtype": dtype_name(self.dtype),
            "peak_flop_per_sec": self.peak_flop_per_sec,
            "bandwidth": self.bandwidth,
            "step_flops": self.step_flops,
            "model_flops": self.model_flops,
            "step_bytes": self.step_bytes,
            "unfused_bytes": self.unfused_bytes,
            "roofline_seconds": self.roofline_seconds,
            "bound": self.bound,
            "mfu": self.mfu,
            "seconds": self.seconds,
        }


def step_time(
    cost: Cost,
    device: DeviceSpec | str | torch.device | None = None,
    dtype: torch.dtype = torch.bfloat16,
    *,
    mfu: float = 0.4,
    parameter_bytes: int = 0,
    gradient_bytes: int = 0,
    peak: float | None = None,
) -> StepTime:
    """The time of a training step whose forward is ``cost`` (a dry run of the step's
    forward with its parameters requiring grad), on ``device`` (a device-table name such as
    ``"H100 SXM"``, a ``DeviceSpec``, or a torch device; default the current one).
    ``parameter_bytes`` and ``gradient_bytes`` (the parameters' and their gradients') count
    in the step's least traffic, which bounds its time at the memory bandwidth. ``peak``
    (FLOP/s) overrides the device's peak at ``dtype``.

    >>> from typedflops.nn import Linear
    >>> cost = Linear(8192, 8192, device="meta").estimate(batch=8192)
    >>> timing = step_time(cost, "H100 SXM", mfu=0.5)
    >>> timing.model_flops == 3 * 2 * 8192**3, round(timing.seconds * 1e3, 3)
    (True, 6.668)
    """
    if not 0.0 < mfu <= 1.0:
        raise SpecError.at("step_time()", f"mfu={mfu!r} must be in (0, 1]")
    spec = devices.resolve(device)
    if peak is None:
        peak = devices.peak_flops(dtype, spec)
    if peak is None:
        raise SpecError.at(
            "step_time()", f"{spec.name} has no {dtype} peak ({spec.source})", hint="pass peak="
        )
    flops = cost.flops + cost.backward_flops + cost.recompute_flops
    moved = least_traffic(cost, parameter_bytes, gradient_bytes)
    bound = flops / peak
    if spec.bandwidth:
        bound = max(bound, moved / spec.bandwidth)
    useful = model_flops(cost)
    return StepTime(
        device=spec.name,
        dtype=dtype,
        peak_flop_per_sec=peak,
        bandwidth=spec.bandwidth,
        step_flops=flops,
        model_flops=useful,
        step_bytes=moved,
        roofline_seconds=bound,
        mfu=mfu,
        seconds=useful / (mfu * peak),
        unfused_bytes=(1 + BACKWARD_TRAFFIC) * cost.bytes,
    )


def step_mfu(
    cost: Cost,
    seconds: float,
    device: DeviceSpec | str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    *,
    peak: float | None = None,
) -> float:
    """The MFU of a measured step that took ``seconds``: model FLOPs (PaLM's definition,
    no recomputation) per second over the device's promised dense peak at ``dtype``
    (``peak=`` overrides it). Above 1 is an error: the peak is wrong.

    >>> from typedflops.nn import Linear
    >>> cost = Linear(1024, 1024).estimate(batch=1024)
    >>> step_mfu(cost, 1e-3, peak=1e13)
    0.6442450944
    """
    if seconds <= 0:
        raise SpecError.at("step_mfu()", f"seconds={seconds!r} must be positive")
    figure = peak if peak is not None else devices.peak_flops(dtype, devices.resolve(device))
    if figure is None:
        raise SpecError.at(
            "step_mfu()", f"no {dtype} peak for device {device!r}", hint="pass peak="
        )
    value = model_flops(cost) / seconds / figure
    if value > 1:
        raise SpecError.at(
            "step_mfu()", f"MFU {value:.2f} is above 1: the peak ({figure:.3g} FLOP/s) is wrong"
        )
    return value
