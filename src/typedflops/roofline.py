"""The roofline model: attainable FLOP/s = min(peak, intensity x bandwidth).

Arithmetic intensity is FLOPs per byte of compulsory memory traffic. The ridge point,
peak / bandwidth, is the intensity at which a kernel stops being memory-bound
(Williams, Waterman and Patterson, "Roofline", CACM 2009).

>>> h100 = Roofline(peak_flop_per_sec=989.4e12, bandwidth=3.35e12)
>>> round(h100.ridge, 1)
295.3
>>> h100.bound(1.0), h100.bound(1000.0)
('memory', 'compute')
>>> h100.attainable(1.0) == 3.35e12
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from .errors import SpecError

__all__ = ["Bound", "Roofline", "attainable", "bound", "ridge_point", "roofline"]

Bound = Literal["memory", "compute"]


def ridge_point(peak_flop_per_sec: float, bandwidth: float) -> float:
    """The intensity (FLOP/byte) where the bandwidth roof meets the compute roof."""
    if peak_flop_per_sec <= 0 or bandwidth <= 0:
        raise SpecError.at(
            "ridge_point()",
            f"a roofline needs a positive peak and bandwidth, got {peak_flop_per_sec} FLOP/s "
            f"and {bandwidth} bytes/s",
        )
    return peak_flop_per_sec / bandwidth


def attainable(intensity: float, peak_flop_per_sec: float, bandwidth: float) -> float:
    """The roofline's FLOP/s at ``intensity`` FLOP/byte: ``min(peak, intensity x bandwidth)``."""
    return min(peak_flop_per_sec, intensity * bandwidth)


def bound(intensity: float, ridge: float) -> Bound:
    """``"memory"`` below the ridge point, ``"compute"`` at or above it."""
    return "memory" if intensity < ridge else "compute"


@dataclass(frozen=True)
class Roofline:
    """The two roofs of one device at one dtype: FLOP/s and bytes/s."""

    peak_flop_per_sec: float
    bandwidth: float

    @property
    def ridge(self) -> float:
        """FLOP/byte at which the roofs meet."""
        return ridge_point(self.peak_flop_per_sec, self.bandwidth)

    def attainable(self, intensity: float) -> float:
        """Attainable FLOP/s at ``intensity`` FLOP/byte."""
        return attainable(intensity, self.peak_flop_per_sec, self.bandwidth)

    def bound(self, intensity: float) -> Bound:
        """Whether a kernel of ``intensity`` FLOP/byte is memory- or compute-bound here."""
        return bound(intensity, self.ridge)


def roofline(dtype: torch.dtype, device: torch.device | str | int | None = None) -> Roofline | None:
    """The roofline of ``device`` (default: the current one) at ``dtype``, or ``None``.

    ``None`` when the peak or the bandwidth is unknown (see ``typedflops.devices.explain``).
    Figures: ``typedflops.devices`` (cited per device).
    """
    from . import devices

    spec = devices.device_spec(device)
    peak = devices.peak_flops(dtype, spec if spec is not None else device)
    if spec is None or peak is None or spec.bandwidth is None:
        return None
    return Roofline(peak_flop_per_sec=peak, bandwidth=spec.bandwidth)
