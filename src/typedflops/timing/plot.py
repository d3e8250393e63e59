"""A roofline plot of measurements.

Needs the optional ``matplotlib`` (``pip install 'typedflops[plot]'``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import SpecError
from ..text import dtype_name, format_percent, format_si

if TYPE_CHECKING:
    from .bench import Measurement

__all__ = ["plot_title", "roofline_plot"]


def plot_title(first: Measurement, device_name: str = "", bandwidth: float | None = None) -> str:
    """The plot's title: device, dtype, peak and bandwidth (the roofs), or what is unknown.

    >>> from typedflops.timing.bench import measurement_from
    >>> import torch
    >>> m = measurement_from([1e-3], flops=10**9, bytes_moved=10**7, device="cuda:0",
    ...                      dtype=torch.bfloat16, peak=989.4e12, bandwidth=3.35e12)
    >>> print(plot_title(m, "H100 SXM5 80GB"))
    Roofline of H100 SXM5 80GB (cuda:0), bfloat16
    peak 989 TFLOP/s, bandwidth 3.35 TB/s, ridge 295 FLOP/B
    """
    device = f"{device_name} ({first.device})" if device_name else first.device
    dtype = dtype_name(first.dtype) if first.dtype is not None else "-"
    if first.peak_flop_per_sec is None and bandwidth:
        roofs = (
            f"memory roof: bandwidth {format_si(bandwidth, 'B/s')} (measured)\n"
            "compute roof unknown: no peak FLOP/s (set TYPEDFLOPS_PEAK_FLOPS to give one)"
        )
    elif first.peak_flop_per_sec is None:
        roofs = "peak unknown, so no roofs (set TYPEDFLOPS_PEAK_FLOPS to give one)"
    elif first.ridge is None:
        roofs = f"peak {format_si(first.peak_flop_per_sec, 'FLOP/s')}, bandwidth unknown"
    else:
        bandwidth = first.peak_flop_per_sec / first.ridge
        roofs = (
            f"peak {format_si(first.peak_flop_per_sec, 'FLOP/s')}, bandwidth "
            f"{format_si(bandwidth, 'B/s')}, ridge {first.ridge:.3g} FLOP/B"
        )
    return f"Roofline of {device}, {dtype}\n{roofs}"


def roofline_plot(
    measurements: Sequence[Measurement],
    labels: Sequence[str],
    path: str,
    *,
    device_name: str = "",
    bandwidth: float | None = None,
) -> None:
    """Write a log-log roofline (attainable FLOP/s against FLOP/B) with each measurement.

    Each point is labelled with its name and MFU; the title names the device
    (``device_name``, e.g. "H100 SXM5 80GB"), the dtype, the peak and the bandwidth; the
    ridge point is marked. The roofs are those of the first measurement's peak and
    bandwidth; without a peak, the memory roof of ``bandwidth`` (a CPU's is measured) is
    drawn alone and the title says the compute roof is unknown. Raises ``ImportError``
    without matplotlib.
    """
    if len(measurements) != len(labels):
        raise SpecError.at(
            "roofline_plot()", f"{len(measurements)} measurements but {len(labels)} labels"
        )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(
            "a roofline plot needs matplotlib: pip install 'typedflops[plot]'"
        ) from None
    figure, axes = plt.subplots(figsize=(8, 5))
    intensities = [m.intensity for m in measurements if m.intensity]
    first = measurements[0] if measurements else None
    roofs = first is not None and bool(first.peak_flop_per_sec and first.ridge)
    if first is not None and first.peak_flop_per_sec and first.ridge:
        peak, ridge = first.peak_flop_per_sec, first.ridge
        bandwidth = peak / ridge
        low = min([*intensities, ridge]) / 10
        high = max([*intensities, ridge]) * 10
        xs = [low * (high / low) ** (i / 200) for i in range(201)]
        axes.plot(xs, [min(peak, x * bandwidth) for x in xs], color="black", linewidth=1.5)
        axes.axvline(ridge, color="grey", linestyle="--", linewidth=1)
        axes.annotate(
            f"ridge {ridge:.3g} FLOP/B",
            (ridge, peak),
            xytext=(6, -14),
            textcoords="offset points",
            color="dimgrey",
        )
    elif first is not None and bandwidth and intensities:
        low, high = min(intensities) / 10, max(intensities) * 10
        xs = [low * (high / low) ** (i / 200) for i in range(201)]
        axes.plot(xs, [x * bandwidth for x in xs], color="black", linewidth=1.5)
        axes.annotate(
            f"memory roof, {format_si(bandwidth, 'B/s')} (measured)",
            (xs[150], xs[150] * bandwidth),
            xytext=(-6, 8),
            textcoords="offset points",
            ha="right",
            color="dimgrey",
        )
        roofs = True
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (measurement, label) in enumerate(zip(measurements, labels, strict=True)):
        if not measurement.intensity:
            continue
        color = colors[index % len(colors)]
        mfu = "MFU n/a" if measurement.mfu is None else f"MFU {format_percent(measurement.mfu)}"
        point = (measurement.intensity, measurement.flop_per_sec)
        axes.scatter(*point, color=color, zorder=3)
        # alternate sides, so that the labels of neighbouring points do not overlap
        above = index % 2 == 0
        axes.annotate(
            f"{label}\n{mfu}",
            point,
            xytext=(-30 if above else 30, 28 if above else -34),
            textcoords="offset points",
            ha="right" if above else "left",
            multialignment="left",
            fontsize=9,
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none"},
            color=color,
            arrowprops={"arrowstyle": "-", "color": color, "linewidth": 0.8},
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP/B)")
    axes.set_ylabel("FLOP/s")
    axes.grid(True, which="major", linewidth=0.3)
    axes.margins(x=0.15, y=0.25)
    rates = [m.flop_per_sec for m in measurements if m.intensity]
    if not roofs and intensities:  # a decade each way, so that log ticks are readable
        axes.set_xlim(min(intensities) / 4, max(intensities) * 4)
        axes.set_ylim(min(rates) / 4, max(rates) * 4)
    if first is not None:
        axes.set_title(plot_title(first, device_name, bandwidth), fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
