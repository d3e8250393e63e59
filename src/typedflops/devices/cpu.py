"""The theoretical peak of the CPU cores torch runs on: cores x clock x FLOP/cycle.

* Cores: the threads torch uses (``torch.get_num_threads()``), at most the physical cores
  this process may run on.
* Clock: the maximum the OS reports (``cpuinfo_max_freq`` in sysfs, or ``lscpu``'s
  "CPU max MHz"), else the nominal clock in the model name ("... @ 3.70GHz"). Nothing is
  measured and nothing guessed: with none of these the peak is unknown, and the reason says
  which sources were missing. (A VM's "cpu MHz" is the host's base clock, which turbo
  exceeds: it is not used.)
* FLOP/cycle: the core's vector units, from the cited table in ``typedflops.devices.cpu_table``.

The memory bandwidth is measured (a copy of twice the last-level cache, best of 10) and
labelled as measured; it places a call on the roofline but never enters an MFU.

>>> info = parse_cpuinfo(SAMPLE_CPUINFO)
>>> info.identity.model_name, info.threads_per_core, nominal_clock_hz(info.identity.model_name)
('Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz', 2, 2500000000.0)
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .cpu_table import CoreRates, CpuIdentity, core_rates

__all__ = [
    "SAMPLE_CPUINFO",
    "CpuInfo",
    "CpuPeaks",
    "cpu_info",
    "cpu_peaks",
    "last_level_cache_bytes",
    "max_clock_hz",
    "measured_bandwidth",
    "nominal_clock_hz",
    "parse_cpuinfo",
]

PROC_CPUINFO = Path("/proc/cpuinfo")
SYS_CPU = Path("/sys/devices/system/cpu")
_MIB = 1 << 20

#: An excerpt of /proc/cpuinfo, for the examples.
SAMPLE_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz
cpu MHz\t\t: 2494.140
siblings\t: 4
cpu cores\t: 2
flags\t\t: fpu sse2 avx fma avx2 avx512f
"""


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says about the first processor."""

    identity: CpuIdentity
    threads_per_core: int


def _integer(text: str | None) -> int:
    if text is None:
        return 0
    try:
        return int(text, 0)  # "85", and Arm's "0x41" / "0xd0c"
    except ValueError:
        return 0


def parse_cpuinfo(text: str, machine: str | None = None) -> CpuInfo | None:
    """Parse /proc/cpuinfo text (its first processor block); ``None`` when it lists no ISA.

    x86 blocks give vendor, family and model; Arm blocks give the implementer and part, kept
    in ``family`` and ``model``.
    """
    fields: dict[str, str] = {}
    for line in text.split("\n\n")[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags", fields.get("Features"))
    if flags is None:
        return None
    arm = "CPU implementer" in fields
    siblings, cores = _integer(fields.get("siblings")), _integer(fields.get("cpu cores"))
    identity = CpuIdentity(
        vendor=fields.get("vendor_id", "ARM" if arm else ""),
        family=_integer(fields.get("CPU implementer" if arm else "cpu family")),
        model=_integer(fields.get("CPU part" if arm else "model")),
        machine=machine or ("aarch64" if arm else "x86_64"),
        flags=frozenset(flags.split()),
        model_name=fields.get("model name", ""),
    )
    return CpuInfo(identity, max(1, siblings // cores) if siblings and cores else 1)


_NOMINAL = re.compile(r"@\s*([\d.]+)\s*GHz", re.IGNORECASE)


def nominal_clock_hz(model_name: str) -> float | None:
    """The clock printed in a model name ("Intel(R) Core(TM) i7-8700K CPU @ 3.70GHz")."""
    found = _NOMINAL.search(model_name)
    return float(found.group(1)) * 1e9 if found else None


def _lscpu() -> str:
    path = shutil.which("lscpu")
    if path is None:
        return ""
    try:
        return subprocess.run(
            [path], capture_output=True, text=True, timeout=5, check=False, env={"LC_ALL": "C"}
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def max_clock_hz(
    model_name: str, sys_cpu: Path = SYS_CPU, lscpu: Callable[[], str] = _lscpu
) -> tuple[float | None, str]:
    """The highest clock the OS reports for this CPU, and where it comes from (or why not).

    In order: sysfs ``cpu0/cpufreq/cpuinfo_max_freq`` (kHz), ``lscpu``'s "CPU max MHz", the
    nominal clock in the model name. ``(None, reason)`` when none is there.
    """
    max_freq = sys_cpu / "cpu0/cpufreq/cpuinfo_max_freq"
    try:
        return float(max_freq.read_text()) * 1e3, f"maximum clock, {max_freq}"
    except (OSError, ValueError):
        pass
    found = re.search(r"^CPU max MHz:\s*([\d.]+)", lscpu(), flags=re.MULTILINE)
    if found and float(found.group(1)) > 0:
        return float(found.group(1)) * 1e6, "maximum clock, lscpu"
    nominal = nominal_clock_hz(model_name)
    if nominal is not None:
        return nominal, "nominal clock in the model name; turbo may run above it"
    return None, (
        f"the CPU's clock is unknown: no {max_freq}, no 'CPU max MHz' from lscpu, and no "
        f"'@ ...GHz' in the model name {model_name or '(none)'!r}"
    )


def last_level_cache_bytes(sys_cpu: Path = SYS_CPU) -> int:
    """The largest cache of cpu0 in sysfs, in bytes (0 when sysfs has none)."""
    sizes = [0]
    for size_file in sys_cpu.glob("cpu0/cache/index*/size"):
        text = size_file.read_text().strip()
        scale = {"K": 1 << 10, "M": _MIB}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        sizes.append(int(digits) * scale if digits.isdigit() else 0)
    return max(sizes)


@functools.cache
def measured_bandwidth(threads: int) -> tuple[float, int]:
    """Bytes/s of ``dst.copy_(src)`` (read + write) at ``threads`` torch threads, and the
    buffer size: twice the last-level cache, 32-256 MiB, the best of 10 copies."""
    nbytes = min(max(2 * last_level_cache_bytes(), 32 * _MIB), 256 * _MIB)
    before = torch.get_num_threads()
    # on the CPU whatever the default device, and seen by no dispatch mode around (a
    # record, a FlopCounterMode): a measurement, not the user's work
    with _disable_current_modes():
        source = torch.ones(nbytes // 4, device="cpu")
        target = torch.empty_like(source)
    torch.set_num_threads(threads)
    try:
        with _disable_current_modes():
            target.copy_(source)  # first touch: page faults
            best = float("inf")
            for _ in range(10):
                start = time.perf_counter()
                target.copy_(source)
                best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    return 2 * nbytes / best, nbytes


@dataclass(frozen=True)
class CpuPeaks:
    """The theoretical peaks (FLOP/s per dtype) of the cores in use, or why there are none.

    ``peak_flops`` is empty when the clock or the core's FLOP/cycle is unknown (``missing``
    says which); ``bandwidth`` is measured; ``source`` spells out the product.
    """

    model_name: str
    cores: int
    peak_flops: Mapping[torch.dtype, float]
    bandwidth: float | None
    source: str
    missing: str


@functools.cache
def cpu_info() -> tuple[CpuInfo | None, str]:
    """This machine's /proc/cpuinfo, parsed once; ``(None, reason)`` where it cannot be."""
    try:
        text = PROC_CPUINFO.read_text()
    except OSError:
        return None, f"cannot read {PROC_CPUINFO}, so the CPU's ISA and clock are unknown"
    info = parse_cpuinfo(text, platform.machine().lower())
    return info, "" if info is not None else f"{PROC_CPUINFO} lists no ISA flags"


@functools.cache
def _core(info: CpuInfo) -> tuple[CoreRates | None, float | None, str, str]:
    rates, why_not = core_rates(info.identity)
    hz, how = max_clock_hz(info.identity.model_name)
    return rates, hz, how, why_not


def physical_cores(threads_per_core: int) -> int:
    """Physical cores this process may run on (its CPU affinity over SMT siblings)."""
    affinity = getattr(os, "sched_getaffinity", None)
    logical = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return max(1, logical // threads_per_core)


def cpu_peaks(threads: int | None = None, *, bandwidth: bool = True) -> CpuPeaks | None:
    """Theoretical peaks of ``threads`` cores (default: torch's thread count) of this CPU.

    ``None`` where /proc/cpuinfo cannot be read (not Linux). ``bandwidth=False`` skips the
    measured copy (~0.1-0.5 s, once per thread count and process).
    """
    info = cpu_info()[0]
    if info is None:
        return None
    threads = torch.get_num_threads() if threads is None else threads
    cores = min(threads, physical_cores(info.threads_per_core))
    rates, hz, how, why_no_rates = _core(info)
    missing = why_no_rates or (how if hz is None else "")
    measured, copied = measured_bandwidth(threads) if bandwidth else (None, 0)
    copy_note = f"bandwidth measured: best of 10 copies of {copied // _MIB} MiB"
    if rates is None or hz is None:
        source = copy_note if measured else ""
        return CpuPeaks(info.identity.model_name, cores, {}, measured, source, missing)
    per_core = {
        torch.float32: rates.fp32,
        torch.float64: rates.fp64,
        torch.bfloat16: rates.bf16,
        torch.float16: rates.fp16,
    }
    peaks = {dtype: cores * hz * flop for dtype, flop in per_core.items() if flop is not None}
    source = (
        f"theoretical: {cores} cores (torch threads) x {hz / 1e9:.2f} GHz ({how}) x "
        f"{rates.fp32} FP32 FLOP/cycle, {rates.name} ({rates.source})"
        + ("; " + copy_note if measured else "")
    )
    return CpuPeaks(info.identity.model_name, cores, peaks, measured, source, "")
