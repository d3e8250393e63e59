"""Promised peak FLOP/s and memory bandwidth per device, with the source of every figure.

GPUs come from a cited table (``typedflops.devices.gpus``; figures from NVIDIA and AMD
datasheets and architecture whitepapers, dense). A CPU gets the theoretical peak of the cores
torch uses (``typedflops.devices.cpu``: cores x clock x FLOP/cycle, cited per core design) and a
measured bandwidth, labelled as measured. Unknown devices get ``None`` and a reason
(``explain``), never another device's figure.

>>> spec = lookup("NVIDIA H100 80GB HBM3")
>>> spec.name, spec.peak_flops[torch.bfloat16], spec.bandwidth
('H100 SXM5 80GB', 989400000000000.0, 3350000000000.0)
>>> lookup("NVIDIA L40S").name, lookup("nvidia l4").name, lookup("NVIDIA L40").name
('L40S', 'L4', 'L40')
>>> lookup("NVIDIA A10G").name, lookup("AMD Instinct MI300X").name
('A10G', 'MI300X')
>>> peak_flops(torch.float32, spec, tf32=True)
494700000000000.0
"""

from __future__ import annotations

import functools
import os
import re
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch

from ..errors import SpecError
from ..text import dtype_name
from .cpu import cpu_info, cpu_peaks
from .gpus import BRAND_TOKENS, GPU_TABLE, DeviceRecord

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
    "peak_source",
    "resolve",
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
    figures, ``estimate`` is True where a figure is measured rather than published (a CPU's
    bandwidth), ``note`` says how the name was matched when it was ambiguous, ``missing`` why
    a CPU has no peaks, and ``cores`` the CPU cores the peaks count. ``memory`` is the
    device's memory in bytes as its datasheet prints it (``None`` when not in the table),
    cited by ``memory_source``. ``nvlink`` and ``infiniband`` are the bandwidths (bytes/s,
    each way) to the GPUs of the node and, per GPU, out of it, for ``gpus_per_node`` GPUs a
    node (``None`` where unknown), cited by ``links_source``. ``capability`` is an NVIDIA
    GPU's compute capability, ``(9, 0)`` for an H100 (``None`` for a CPU, an AMD GPU or a
    spec that does not say): a dry run for the device costs attention as the kernel torch
    picks on it (:func:`typedflops.planning.kernels_of`).
    """

    name: str
    peak_flops: dict[torch.dtype, float]
    bandwidth: float | None
    source: str
    kind: str = "cuda"
    tf32_flops: float | None = None
    estimate: bool = False
    note: str = field(default="", compare=False)
    missing: str = ""
    cores: int | None = None
    memory: float | None = None
    memory_source: str = ""
    nvlink: float | None = None
    infiniband: float | None = None
    gpus_per_node: int | None = None
    links_source: str = ""
    capability: tuple[int, int] | None = None

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
    links = record.links
    return DeviceSpec(
        name=record.sku,
        peak_flops=peaks,
        bandwidth=record.bandwidth_tbs * _TERA,
        source=record.source,
        kind="cuda",
        tf32_flops=None if tf32 is None else tf32 * _TERA,
        note=note,
        memory=None if record.memory_gb is None else record.memory_gb * 1e9,
        memory_source=record.memory_source,
        # datasheets print NVLink both ways together (GB/s) and InfiniBand each way (Gb/s)
        nvlink=None if links is None else links.nvlink_gbs / 2 * 1e9,
        infiniband=None if links is None else links.infiniband_gbits / 8 * 1e9,
        gpus_per_node=None if links is None else links.gpus_per_node,
        links_source="" if links is None else links.source,
        capability=record.capability,
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
    Source of the figures: vendor datasheets and architecture whitepapers (see ``source``).

    >>> lookup("NVIDIA A100-SXM4-40GB").bandwidth
    1555000000000.0
    >>> lookup("NVIDIA GeForce RTX 4090 D") is None
    True
    """
    record, note, guessed = _match(name)
    return None if record is None else _spec_from_record(record, note if guessed else "")


def explain(name: str) -> str:
    """Why ``lookup(name)`` gives what it gives: the SKU matched, or the reason for ``None``.

    >>> explain("NVIDIA L40X").split(";")[0]
    "'NVIDIA L40X' (tokens ['l40x']) is not in the device table"
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
    wanted = None if dtype is None else dtype_name(dtype)
    generic: float | None = None
    specific: float | None = None
    for item in raw.split(","):
        key, sep, value = item.rpartition("=")
        try:
            figure = float(value)
        except ValueError:
            raise SpecError.at(
                f"{ENV_PEAK_FLOPS}={raw!r}",
                f"{value.strip()!r} is not a number of FLOP/s",
                hint="write e.g. 312e12 or bfloat16=989.4e12,float32=67e12",
            ) from None
        if not 0 < figure < float("inf"):
            raise SpecError.at(f"{ENV_PEAK_FLOPS}={raw!r}", "a peak must be positive and finite")
        name = key.strip().removeprefix("torch.")
        if sep and not isinstance(getattr(torch, name, None), torch.dtype):
            raise SpecError.at(f"{ENV_PEAK_FLOPS}={raw!r}", f"{name!r} is not a torch dtype")
        if not sep:
            generic = figure
        elif name == wanted:
            specific = figure
    return specific if specific is not None else generic


def _cuda_index(device: torch.device) -> int:
    return torch.cuda.current_device() if device.index is None else device.index


@functools.cache
def _cuda_spec(name: str) -> tuple[DeviceSpec | None, str]:
    spec = lookup(name)
    return spec, explain(name)


# --- CPU ----------------------------------------------------------------------------------


def cpu_spec(threads: int | None = None) -> DeviceSpec | None:
    """The theoretical peaks of the CPU cores torch uses: cores x clock x FLOP/cycle.

    Cores are torch's threads (``torch.get_num_threads()``, or ``threads``), at most the
    physical cores this process may use; the clock is the OS's maximum or the model name's
    nominal clock; FLOP/cycle comes from the cited per-core table
    (``typedflops.devices.cpu_table``).
    With the clock or the core unknown the spec has no peaks and ``missing`` says why.
    Bandwidth is measured (labelled so in ``source``). ``None`` off Linux.
    """
    peaks = cpu_peaks(threads)
    if peaks is None:
        return None
    return DeviceSpec(
        name=f"cpu: {peaks.model_name or 'unknown model'}",
        peak_flops=dict(peaks.peak_flops),
        bandwidth=peaks.bandwidth,
        source=peaks.source,
        kind="cpu",
        estimate=True,
        missing=peaks.missing,
        cores=peaks.cores,
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
        return spec, "" if spec is not None else f"cpu: {cpu_info()[1]}"
    return None, f"no peak figures for {resolved.type!r} devices"


def device_spec(device: torch.device | str | int | None = None) -> DeviceSpec | None:
    """The ``DeviceSpec`` of ``device`` (default: the current CUDA device, else the CPU)."""
    return _spec_and_reason(device)[0]


_TORCH_DEVICE = re.compile(r"(cpu|cuda|mps|xpu|meta)(:\d+)?")


def resolve(device: DeviceSpec | torch.device | str | int | None = None) -> DeviceSpec:
    """The one way from a device to its figures: a :class:`DeviceSpec` as it is, a name of
    the table (``"H100 SXM"``, a ``torch.cuda.get_device_name`` string), a torch device
    (``"cpu"``, ``"cuda:1"``, an index) or None (the current device). A device with no
    figures is a :class:`SpecError` that says why.

    >>> resolve("H100 SXM").memory
    80000000000.0
    >>> resolve("NVIDIA L40X")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    typedflops.errors.SpecError: unknown device 'NVIDIA L40X': ... known: "H100 SXM5 80GB", ...
    """
    if isinstance(device, DeviceSpec):
        return device
    if isinstance(device, str) and not _TORCH_DEVICE.fullmatch(device):
        found = lookup(device)
        if found is None:
            reason = _match(device)[1]
            known = ", ".join(f'"{record.sku}"' for record in GPU_TABLE)
            raise SpecError.at(None, f"unknown device {device!r}: {reason}", hint=f"known: {known}")
        return found
    spec, reason = _spec_and_reason(device)
    if spec is None:
        raise SpecError.at(None, f"no figures for device {device!r}: {reason}")
    return spec


_warned: set[str] = set()


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"typedflops: no peak FLOP/s: {reason}", stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning raised by this function's caller name the
    first line outside typedflops (the user's ``benchmark(...)`` call, not ours)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        package
    ):
        frame = frame.f_back
        level += 1
    return level


def peak_source(
    dtype: torch.dtype,
    device: torch.device | str | int | DeviceSpec | None = None,
    *,
    tf32: bool | None = None,
) -> tuple[float | None, str]:
    """``peak_flops`` without the warning: the figure and where it comes from, or ``None`` and
    the reason there is none.

    >>> peak_source(torch.float16, lookup("Tesla T4"))[1].split(" (")[0]
    'T4: NVIDIA T4 Tensor Core GPU datasheet'
    """
    override = env_peak_flops(dtype)
    if override is not None:
        return override, ENV_PEAK_FLOPS
    spec: DeviceSpec | None = device if isinstance(device, DeviceSpec) else None
    reason = ""
    if not isinstance(device, DeviceSpec):
        spec, reason = _spec_and_reason(device)
    if spec is None:
        return None, reason
    use_tf32 = spec.kind == "cuda" and (tf32_enabled() if tf32 is None else tf32)
    figure = spec.peak(dtype, tf32=use_tf32)
    if figure is None:
        return None, f"{spec.name} has no {dtype} figure ({spec.missing or spec.source})"
    return figure, f"{spec.name}: {spec.source}"


def peak_flops(
    dtype: torch.dtype,
    device: torch.device | str | int | DeviceSpec | None = None,
    *,
    tf32: bool | None = None,
) -> float | None:
    """Dense peak FLOP/s of ``device`` (default: the current one) at ``dtype``.

    ``TYPEDFLOPS_PEAK_FLOPS`` overrides the table. float32 on a GPU uses the TF32 rate only
    when torch would use TF32 (``tf32=None`` asks torch; see ``tf32_enabled``). An unknown
    device gives ``None`` and a warning with the reason. Source: ``peak_source``.
    """
    figure, source = peak_source(dtype, device, tf32=tf32)
    if figure is None:
        _warn_once(source)
    return figure


def bandwidth(device: torch.device | str | int | DeviceSpec | None = None) -> float | None:
    """Memory bandwidth of ``device`` in bytes/s, or ``None`` when unknown."""
    spec = device if isinstance(device, DeviceSpec) else device_spec(device)
    return None if spec is None else spec.bandwidth
