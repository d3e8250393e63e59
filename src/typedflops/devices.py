"""Promised peak FLOP/s and memory bandwidth per device, with the source of every figure.

GPUs come from a cited table (``typedflops.device_table``; figures from NVIDIA datasheets and
architecture whitepapers, dense). A CPU gets an estimate, labelled as one. Unknown devices get
``None`` and a reason (``explain``), never another device's figure.

>>> spec = lookup("NVIDIA H100 80GB HBM3")
>>> spec.name, spec.peak_flops[torch.bfloat16], spec.bandwidth
('H100 SXM5 80GB', 989400000000000.0, 3350000000000.0)
>>> lookup("NVIDIA L40S").name, lookup("nvidia l4").name
('L40S', 'L4')
>>> lookup("NVIDIA A10G") is None
True
>>> peak_flops(torch.float32, spec, tf32=True)
494700000000000.0
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import platform
import re
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .device_table import BRAND_TOKENS, GPU_TABLE, KNOWN_WITHOUT_FIGURES, DeviceRecord
from .errors import SpecError

__all__ = [
    "ENV_PEAK_FLOPS",
    "DeviceSpec",
    "bandwidth",
    "cpu_spec",
    "device_spec",
    "env_peak_flops",
    "explain",
    "lookup",
    "peak_flops",
    "tf32_enabled",
]

#: Overrides the table: ``312e12`` (any dtype) or ``bfloat16=989e12,float32=67e12`` (FLOP/s).
ENV_PEAK_FLOPS = "TYPEDFLOPS_PEAK_FLOPS"

_TERA = 1e12
_RATE_TO_DTYPES: Mapping[str, tuple[torch.dtype, ...]] = {
    "float64": (torch.float64,),
    "float32": (torch.float32,),
    "bfloat16": (torch.bfloat16,),
    "float16": (torch.float16,),
    "float8": (torch.float8_e4m3fn, torch.float8_e5m2),
}


@dataclass(frozen=True)
class DeviceSpec:
    """Promised dense peaks of one device.

    ``peak_flops`` maps a dtype to FLOP/s (dense; a dtype the device has no rate for is absent),
    ``tf32_flops`` is the TF32 tensor-core rate used for float32 matmuls when torch enables TF32,
    ``bandwidth`` is memory bandwidth in bytes/s (``None`` when unknown), ``source`` cites the
    figures, ``estimate`` is True for figures that are estimates (CPUs), and ``note`` says how
    the name was matched when it was ambiguous.
    """

    name: str
    peak_flops: dict[torch.dtype, float]
    bandwidth: float | None
    source: str
    kind: str = "cuda"
    tf32_flops: float | None = None
    estimate: bool = False
    note: str = field(default="", compare=False)

    def peak(self, dtype: torch.dtype, *, tf32: bool = False) -> float | None:
        """Dense peak FLOP/s for ``dtype``; float32 on a GPU uses TF32 when ``tf32`` is True.

        >>> lookup("Tesla T4").peak(torch.float32, tf32=True)  # Turing has no TF32
        8100000000000.0
        """
        if dtype == torch.float32 and tf32 and self.tf32_flops is not None:
            return self.tf32_flops
        return self.peak_flops.get(dtype)


def _tokens(name: str) -> frozenset[str]:
    words = re.split(r"[\s\-_/(),]+", name.lower())
    return frozenset(word for word in words if word and word not in BRAND_TOKENS)


def _spec_from_record(record: DeviceRecord, note: str = "") -> DeviceSpec:
    peaks: dict[torch.dtype, float] = {}
    for rate, dtypes in _RATE_TO_DTYPES.items():
        tflops = record.tflops.get(rate)
        if tflops is not None:
            peaks.update({dtype: tflops * _TERA for dtype in dtypes})
    tf32 = record.tflops.get("tf32")
    return DeviceSpec(
        name=record.sku,
        peak_flops=peaks,
        bandwidth=record.bandwidth_tbs * _TERA,
        source=record.source,
        kind="cuda",
        tf32_flops=None if tf32 is None else tf32 * _TERA,
        note=note,
    )


def _rank(record: DeviceRecord) -> tuple[float, float]:
    rates = [tflops for tflops in record.tflops.values() if tflops is not None]
    return max(rates, default=0.0), record.bandwidth_tbs


def _match(
    name: str, table: Iterable[DeviceRecord] = GPU_TABLE
) -> tuple[DeviceRecord | None, str, bool]:
    """The record a device name denotes, a sentence on how (or why not), and if it was a guess."""
    tokens = _tokens(name)
    shown = f"{name!r} (tokens {sorted(tokens)})"
    records = tuple(table)
    family = [record for record in records if record.model in tokens]
    fitting = [record for record in family if tokens <= record.allowed]
    if len(fitting) == 1:
        return fitting[0], f"{name!r} is the {fitting[0].sku}", False
    if fitting:
        best = max(fitting, key=_rank)
        others = ", ".join(record.sku for record in fitting if record is not best)
        return (
            best,
            (
                f"{name!r} could be {best.sku} or {others}; took {best.sku}, the highest figures, "
                "so that an MFU against it is never overstated"
            ),
            True,
        )
    if "mig" in tokens:
        return None, f"{shown} is a MIG slice, which has a fraction of the GPU's peaks", False
    known = sorted(tokens & KNOWN_WITHOUT_FIGURES.keys())
    if known:
        return None, f"{shown}: {KNOWN_WITHOUT_FIGURES[known[0]]}", False
    if family:
        strange = sorted(tokens - frozenset().union(*(record.allowed for record in family)))
        skus = ", ".join(record.sku for record in family)
        return (
            None,
            (
                f"{shown} has tokens {strange} that no record of {skus} allows: a different SKU, "
                "so none of their figures applies"
            ),
            False,
        )
    return None, f"{shown} is not in the device table", False


def lookup(name: str) -> DeviceSpec | None:
    """The promised dense peaks of the GPU a ``torch.cuda.get_device_name`` string names.

    Matching is case-insensitive and by tokens ("NVIDIA L40S" is never the L4). A name that
    several SKUs fit (a bare "NVIDIA H100") takes the one with the highest figures, and says so
    in ``note``. An unknown name gives ``None``; ``explain(name)`` says why.
    Source of the figures: NVIDIA datasheets and architecture whitepapers (see ``source``).

    >>> lookup("NVIDIA A100-SXM4-40GB").bandwidth
    1555000000000.0
    >>> lookup("NVIDIA GeForce RTX 4090 D") is None
    True
    """
    record, note, guessed = _match(name)
    return None if record is None else _spec_from_record(record, note if guessed else "")


def explain(name: str) -> str:
    """Why ``lookup(name)`` gives what it gives: the SKU matched, or the reason for ``None``.

    >>> explain("NVIDIA L40").split(";")[0]
    "'NVIDIA L40' (tokens ['l40']) is not in the device table"
    """
    record, note, _ = _match(name)
    if record is None:
        return note + "; pass peak= or set " + ENV_PEAK_FLOPS
    return f"{note} ({record.source})"


def tf32_enabled() -> bool:
    """Whether torch runs float32 CUDA matmuls in TF32 (new or legacy precision API).

    Reading the legacy flags raises in torch >= 2.9 once the new API was used, so the new
    ``fp32_precision`` is read first.
    """
    matmul = torch.backends.cuda.matmul
    precision = str(getattr(matmul, "fp32_precision", ""))
    if precision == "none":
        precision = str(getattr(torch.backends, "fp32_precision", ""))
    if precision in ("tf32", "ieee"):
        return precision == "tf32"
    try:
        return bool(matmul.allow_tf32) or torch.get_float32_matmul_precision() != "highest"
    except RuntimeError:
        return False


def env_peak_flops(dtype: torch.dtype | None) -> float | None:
    """The peak ``TYPEDFLOPS_PEAK_FLOPS`` sets for ``dtype``, or None; raises SpecError if bad.

    >>> os.environ[ENV_PEAK_FLOPS] = "bfloat16=989.4e12, 100e12"
    >>> env_peak_flops(torch.bfloat16), env_peak_flops(torch.float32)
    (989400000000000.0, 100000000000000.0)
    >>> del os.environ[ENV_PEAK_FLOPS]
    """
    raw = os.environ.get(ENV_PEAK_FLOPS, "").strip()
    if not raw:
        return None
    dtype_name = None if dtype is None else str(dtype).removeprefix("torch.")
    generic: float | None = None
    specific: float | None = None
    for item in raw.split(","):
        key, sep, value = item.rpartition("=")
        try:
            figure = float(value)
        except ValueError:
            raise SpecError(
                f"{ENV_PEAK_FLOPS}={raw!r}: {value.strip()!r} is not a number of FLOP/s; "
                "write e.g. 312e12 or bfloat16=989.4e12,float32=67e12"
            ) from None
        if not 0 < figure < float("inf"):
            raise SpecError(f"{ENV_PEAK_FLOPS}={raw!r}: a peak must be positive and finite")
        name = key.strip().removeprefix("torch.")
        if sep and not isinstance(getattr(torch, name, None), torch.dtype):
            raise SpecError(f"{ENV_PEAK_FLOPS}={raw!r}: {name!r} is not a torch dtype")
        if not sep:
            generic = figure
        elif name == dtype_name:
            specific = figure
    return specific if specific is not None else generic


def _cuda_index(device: torch.device) -> int:
    return torch.cuda.current_device() if device.index is None else device.index


@functools.cache
def _cuda_spec(name: str) -> tuple[DeviceSpec | None, str]:
    spec = lookup(name)
    return spec, explain(name)


# --- CPU estimate ---------------------------------------------------------------------------

_PROC_CPUINFO = Path("/proc/cpuinfo")
_SYS_CPU = Path("/sys/devices/system/cpu")
_MIB = 1 << 20

# x86-64 System V, uint64_t f(uint64_t n): mov rcx, rdi; xor eax, eax;
# loop: 8 x add rax, rcx; dec rcx; jnz loop; ret. Each iteration is a chain of 8 dependent
# register adds (1 cycle each on every x86 core since 2011; register operands, so no
# immediate folding), so n iterations take 8n cycles whatever the branch throughput.
_ADD_CHAIN = 8
_CLOCK_LOOP = bytes.fromhex("4889f9" + "31c0" + "4801c8" * _ADD_CHAIN + "48ffc9" + "75e3" + "c3")


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says about the first processor."""

    model: str
    vendor: str
    family: int
    flags: frozenset[str]
    threads_per_core: int
    reported_mhz: float | None


def parse_cpuinfo(text: str) -> CpuInfo | None:
    """Parse /proc/cpuinfo text (first processor block; the highest ``cpu MHz`` of all)."""
    fields: dict[str, str] = {}
    for line in text.split("\n\n")[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags", fields.get("Features"))
    if flags is None:
        return None
    mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", text, flags=re.MULTILINE)]
    siblings, cores = fields.get("siblings", "1"), fields.get("cpu cores", "1")
    threads_per_core = max(1, int(siblings) // max(1, int(cores))) if cores.isdigit() else 1
    family = fields.get("cpu family", "0")
    return CpuInfo(
        model=fields.get("model name", "unknown CPU"),
        vendor=fields.get("vendor_id", ""),
        family=int(family) if family.isdigit() else 0,
        flags=frozenset(flags.split()),
        threads_per_core=threads_per_core,
        reported_mhz=max(mhz, default=None),
    )


def flop_per_cycle(vendor: str, family: int, flags: frozenset[str]) -> tuple[int, str] | None:
    """FP32 FLOP per cycle per core from ISA flags, an upper bound where SKUs differ.

    Source: shared/NOTES.md (AVX2 with 2 FMA units or Zen 4 AVX-512: 32; Intel AVX-512 with 2
    FMA units, Zen 5: 64); AVX without FMA is one 8-wide add and one 8-wide multiply a cycle.

    >>> flop_per_cycle("AuthenticAMD", 25, frozenset({"avx2", "fma", "avx512f"}))
    (32, 'Zen 4 AVX-512 (256-bit datapaths)')
    """
    if "avx512f" in flags:
        if vendor == "AuthenticAMD" and family < 0x1A:
            return 32, "Zen 4 AVX-512 (256-bit datapaths)"
        return 64, "AVX-512 with 2 FMA units assumed"
    if "avx2" in flags and "fma" in flags:
        return 32, "AVX2 with 2 FMA units assumed"
    if "avx" in flags:
        return 16, "AVX without FMA"
    return None


def _measure_clock_hz(timer: Callable[[], float] = time.perf_counter) -> float | None:
    """The core clock, from the time of a chain of dependent adds; None where it cannot run."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    try:
        code = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError):  # W^X policies (SELinux deny_execmem, PaX)
        return None
    code.write(_CLOCK_LOOP)
    address = ctypes.addressof(ctypes.c_char.from_buffer(code))
    add_chain = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64)(address)

    def best_seconds(iterations: int) -> float:
        # the fastest of many short runs: a run that was preempted only reads slower
        times = []
        for _ in range(11):
            start = timer()
            add_chain(iterations)
            times.append(timer() - start)
        return min(times)

    iterations = 1 << 17  # 1M cycles, ~0.3 ms
    add_chain(64 * iterations)  # let the clock ramp up
    seconds = best_seconds(2 * iterations) - best_seconds(iterations)
    hz = _ADD_CHAIN * iterations / seconds if seconds > 0 else 0.0
    return hz if 2e8 < hz < 1e10 else None


def _sysfs_max_hz() -> float | None:
    try:
        return float((_SYS_CPU / "cpu0/cpufreq/cpuinfo_max_freq").read_text()) * 1e3
    except (OSError, ValueError):
        return None


def _last_level_cache_bytes() -> int:
    sizes = [0]
    for size_file in _SYS_CPU.glob("cpu0/cache/index*/size"):
        text = size_file.read_text().strip()
        scale = {"K": 1 << 10, "M": _MIB}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        sizes.append(int(digits) * scale if digits.isdigit() else 0)
    return max(sizes)


def _measure_copy_bandwidth() -> tuple[float, int]:
    """Bytes/s of ``dst.copy_(src)`` (read + write) over buffers of twice the LLC (32-256 MiB)."""
    nbytes = min(max(2 * _last_level_cache_bytes(), 32 * _MIB), 256 * _MIB)
    source = torch.ones(nbytes // 4)
    target = torch.empty_like(source)
    target.copy_(source)  # first touch: page faults
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best, nbytes


@dataclass(frozen=True)
class _CpuEstimate:
    model: str
    flop_per_sec: float
    bandwidth: float
    reason: str


@functools.cache
def _cpu_estimate() -> tuple[_CpuEstimate | None, str]:
    try:
        info = parse_cpuinfo(_PROC_CPUINFO.read_text())
    except OSError:
        return None, f"cannot read {_PROC_CPUINFO}, so the ISA and core count are unknown"
    if info is None:
        return None, f"{_PROC_CPUINFO} lists no ISA flags"
    per_cycle = flop_per_cycle(info.vendor, info.family, info.flags)
    if per_cycle is None:
        return None, f"no FLOP/cycle rule for the ISA of {info.model!r}"
    affinity = getattr(os, "sched_getaffinity", None)
    logical = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    cores = max(1, logical // info.threads_per_core)
    clocks = {"OS maximum": _sysfs_max_hz(), "measured": _measure_clock_hz()}
    known = {how: hz for how, hz in clocks.items() if hz is not None}
    if not known and info.reported_mhz is not None:
        known = {"OS-reported, may be the base clock": info.reported_mhz * 1e6}
    if not known:
        return None, "the CPU clock is unknown"
    how, hz = max(known.items(), key=lambda item: item[1])
    reported = f"; the OS reports {info.reported_mhz:.0f} MHz" if info.reported_mhz else ""
    bandwidth, copied = _measure_copy_bandwidth()
    reason = (
        f"{cores} cores x {hz / 1e9:.2f} GHz ({how}{reported}) x {per_cycle[0]} FP32 "
        f"FLOP/cycle ({per_cycle[1]}); float64 half; bandwidth measured by a "
        f"{copied // _MIB} MiB copy"
    )
    estimate = _CpuEstimate(info.model, cores * hz * per_cycle[0], bandwidth, reason)
    return estimate, ""


def cpu_spec() -> DeviceSpec | None:
    """An estimate of this CPU's peaks: cores x clock x FP32 FLOP/cycle of its ISA.

    Cores are the physical cores this process may run on. The clock is the largest of the OS's
    maximum (sysfs) and a measured one (a chain of dependent adds), since a VM's reported MHz
    is often the base clock. float64 is half the float32 rate; other dtypes get no figure.
    Bandwidth is a measured copy rate. Computed once per process, in ~0.1 s.
    Source: shared/NOTES.md (FLOP/cycle per ISA).
    """
    estimate = _cpu_estimate()[0]
    if estimate is None:
        return None
    fp32 = estimate.flop_per_sec
    return DeviceSpec(
        name=f"cpu: {estimate.model}",
        peak_flops={torch.float32: fp32, torch.float64: fp32 / 2},
        bandwidth=estimate.bandwidth,
        source=f"estimate: {estimate.reason}",
        kind="cpu",
        estimate=True,
    )


def _as_device(device: torch.device | str | int | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(device, int):
        return torch.device("cuda", device)
    return torch.device(device)


def _spec_and_reason(device: torch.device | str | int | None) -> tuple[DeviceSpec | None, str]:
    resolved = _as_device(device)
    if resolved.type == "cuda":
        name = torch.cuda.get_device_name(_cuda_index(resolved))
        return _cuda_spec(name)
    if resolved.type == "cpu":
        spec = cpu_spec()
        return spec, "" if spec is not None else f"cpu: {_cpu_estimate()[1]}"
    return None, f"no peak figures for {resolved.type!r} devices"


def device_spec(device: torch.device | str | int | None = None) -> DeviceSpec | None:
    """The ``DeviceSpec`` of ``device`` (default: the current CUDA device, else the CPU)."""
    return _spec_and_reason(device)[0]


_warned: set[str] = set()


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"typedflops: no peak FLOP/s: {reason}", stacklevel=3)


def peak_flops(
    dtype: torch.dtype,
    device: torch.device | str | int | DeviceSpec | None = None,
    *,
    tf32: bool | None = None,
) -> float | None:
    """Dense peak FLOP/s of ``device`` (default: the current one) at ``dtype``.

    ``TYPEDFLOPS_PEAK_FLOPS`` overrides the table. float32 on a GPU uses the TF32 rate only
    when torch would use TF32 (``tf32=None`` asks torch; see ``tf32_enabled``). An unknown
    device gives ``None`` and a warning with the reason. Source: ``device_spec(device).source``.
    """
    override = env_peak_flops(dtype)
    if override is not None:
        return override
    spec: DeviceSpec | None = device if isinstance(device, DeviceSpec) else None
    reason = ""
    if not isinstance(device, DeviceSpec):
        spec, reason = _spec_and_reason(device)
    if spec is None:
        _warn_once(reason)
        return None
    use_tf32 = spec.kind == "cuda" and (tf32_enabled() if tf32 is None else tf32)
    figure = spec.peak(dtype, tf32=use_tf32)
    if figure is None:
        _warn_once(f"{spec.name} has no {dtype} figure ({spec.source})")
    return figure


def bandwidth(device: torch.device | str | int | DeviceSpec | None = None) -> float | None:
    """Memory bandwidth of ``device`` in bytes/s, or ``None`` when unknown."""
    spec = device if isinstance(device, DeviceSpec) else device_spec(device)
    return None if spec is None else spec.bandwidth
