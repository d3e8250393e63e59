"""A roofline plot of measurements.

Needs the optional ``matplotlib`` (``pip install typedflops[plot]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .bench import Measurement

__all__ = ["roofline_plot"]


def roofline_plot(measurements: Sequence[Measurement], labels: Sequence[str], path: str) -> None:
    """Write a log-log roofline (attainable FLOP/s against FLOP/byte) with each measurement.

    The roofs need a known peak and bandwidth for the measurements' device; without them only
    the points are drawn.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            "typedflops: --plot needs matplotlib; install it with pip install 'typedflops[plot]'"
        ) from None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    intensities = [m.intensity for m in measurements if m.intensity]
    first = measurements[0] if measurements else None
    if first is not None and first.peak_flop_per_sec and first.ridge:
        peak = first.peak_flop_per_sec
        bandwidth = peak / first.ridge
        low = min([*intensities, first.ridge]) / 10
        high = max([*intensities, first.ridge]) * 10
        xs = [low * (high / low) ** (i / 200) for i in range(201)]
        axes.plot(
            xs,
            [min(peak, x * bandwidth) for x in xs],
            color="black",
            label=f"roofline (ridge {first.ridge:.3g} FLOP/B)",
        )
    for measurement, label in zip(measurements, labels, strict=True):
        if measurement.intensity:
            axes.scatter([measurement.intensity], [measurement.flop_per_sec], label=label)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP/byte)")
    axes.set_ylabel("FLOP/s")
    device = first.device if first is not None else ""
    axes.set_title(f"Roofline on {device}")
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
