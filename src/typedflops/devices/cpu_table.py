"""FLOPs per cycle per core of CPU vector units, as data: one record per core design, cited.

A core's theoretical FP32 rate is its FMA units x lanes per unit x 2 (an FMA is a multiply
and an add). FP64 is half of FP32 on every design here (half the lanes). BF16 and FP16 have
their own rates only where the core has instructions for them (AMX tiles, AVX-512 BF16/FP16);
elsewhere torch converts them to FP32, so the FP32 rate is their ceiling. Where SKUs of one
design differ (AVX-512 with one or two FMA units, Zen 5 with 256- or 512-bit datapaths) the
record takes the higher figure and says so, so that an MFU against it is never overstated.

Sources: the vendors' optimization manuals name the FMA units and their widths per core:
Intel 64 and IA-32 Architectures Optimization Reference Manual (Intel); Intel ARK's
"# of AVX-512 FMA Units" per SKU; Software Optimization Guide for AMD Family 17h, 19h and
1Ah Processors (AMD); Arm Neoverse and Cortex Software Optimization Guides (Arm).

>>> rates, _ = core_rates(CpuIdentity("GenuineIntel", 6, 0x8F, "x86_64", frozenset({"avx512f"})))
>>> rates.fp32, rates.fp64, rates.name
(64, 32, 'Intel Xeon, Ice Lake-SP and later (AVX-512, 2 FMA units)')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CoreRates", "CpuIdentity", "core_rates"]

_INTEL_MANUAL = "Intel 64 and IA-32 Architectures Optimization Reference Manual"
_AMD_GUIDE = "Software Optimization Guide for AMD Family {} Processors"
_ARM_GUIDE = "Arm {} Software Optimization Guide"


@dataclass(frozen=True)
class CpuIdentity:
    """What the OS says a core is: x86 vendor, family and model, or an Arm implementer and
    part (as ``0x41``/``0xd0c`` integers in ``family``/``model``), its ISA flags and the
    model name (``/proc/cpuinfo``)."""

    vendor: str
    family: int
    model: int
    machine: str
    flags: frozenset[str]
    model_name: str = ""


@dataclass(frozen=True)
class CoreRates:
    """Theoretical FLOP per cycle of one core, per dtype, with the source of the figures.

    ``fp16``/``bf16`` are ``None`` where the core has matrix instructions for them whose rate
    is not in this table (so no figure rather than a wrong one).
    """

    name: str
    fp32: int
    bf16: int | None
    fp16: int | None
    source: str

    @property
    def fp64(self) -> int:
        """FP64 FLOP/cycle: half the lanes of FP32."""
        return self.fp32 // 2


def _x86(name: str, fp32: int, flags: frozenset[str], source: str) -> CoreRates:
    bf16: int | None = fp32
    fp16: int | None = fp32
    if "amx_bf16" in flags:
        bf16 = 1024  # a TMUL tile op: 512 BF16 multiply-adds per cycle per core
        source += "; AMX BF16: 1024 FLOP/cycle (Intel AMX, same manual)"
    elif "avx512_bf16" in flags:
        bf16 = 2 * fp32  # VDPBF16PS: two BF16 products per FP32 lane
    if "amx_fp16" in flags:
        fp16 = 1024
    elif "avx512_fp16" in flags:
        fp16 = 2 * fp32  # FP16 lanes are half as wide
    return CoreRates(name, fp32, bf16, fp16, source)


# Intel family-6 models with AVX-512 and one FMA unit on every SKU (client cores: the port-5
# FMA unit is server-only): Cannon Lake, Ice Lake, Tiger Lake, Rocket Lake, Alder Lake.
_INTEL_ONE_FMA = frozenset({0x66, 0x7D, 0x7E, 0x8C, 0x8D, 0xA7, 0x97, 0x9A})
# Skylake-SP, Cascade Lake, Cooper Lake: one or two FMA units depending on the SKU.
_INTEL_SKYLAKE_SP = 0x55
# Bronze, Silver and Gold 5xxx SKUs have one AVX-512 FMA unit, except the Gold 5122 (ARK).
_ONE_FMA_SKU = re.compile(r"\b(Bronze|Silver)\b|\bGold\s+5(?!122\b)\d{3}", re.IGNORECASE)


def _intel(cpu: CpuIdentity) -> CoreRates | None:
    flags = cpu.flags
    if "avx512f" in flags:
        if cpu.model in _INTEL_ONE_FMA:
            return _x86("Intel client core (AVX-512, 1 FMA unit)", 32, flags, _INTEL_MANUAL)
        if cpu.model == _INTEL_SKYLAKE_SP and _ONE_FMA_SKU.search(cpu.model_name):
            source = f"{_INTEL_MANUAL}; Intel ARK '# of AVX-512 FMA Units': 1 for this SKU"
            return _x86(
                "Intel Xeon Skylake-SP/Cascade Lake (AVX-512, 1 FMA unit)", 32, flags, source
            )
        if cpu.model == _INTEL_SKYLAKE_SP:
            source = (
                f"{_INTEL_MANUAL}; Intel ARK '# of AVX-512 FMA Units': 2 on Gold 6xxx and "
                "Platinum, 1 on Bronze, Silver and Gold 5xxx (the model name does not say "
                "which: 2 assumed, the higher figure)"
            )
            return _x86(
                "Intel Xeon Skylake-SP/Cascade Lake (AVX-512, 2 FMA units)", 64, flags, source
            )
        return _x86(
            "Intel Xeon, Ice Lake-SP and later (AVX-512, 2 FMA units)", 64, flags, _INTEL_MANUAL
        )
    if "avx2" in flags and "fma" in flags:
        return _x86("Intel Haswell and later (AVX2, 2 FMA units)", 32, flags, _INTEL_MANUAL)
    if "avx" in flags:
        return _x86(
            "Intel Sandy Bridge/Ivy Bridge (AVX: 1 add + 1 multiply)", 16, flags, _INTEL_MANUAL
        )
    return None


def _amd(cpu: CpuIdentity) -> CoreRates | None:
    flags = cpu.flags
    if cpu.family == 0x1A:
        return _x86(
            "AMD Zen 5 (AVX-512, 4 x 512-bit FP pipes, 2 FMA; mobile parts with 256-bit "
            "datapaths do half: the higher figure)",
            64,
            flags,
            _AMD_GUIDE.format("1Ah"),
        )
    if cpu.family == 0x19:
        if "avx512f" in flags:
            name = "AMD Zen 4 (AVX-512 over 2 x 256-bit FMA)"
        else:
            name = "AMD Zen 3 (2 x 256-bit FMA)"
        return _x86(name, 32, flags, _AMD_GUIDE.format("19h"))
    if cpu.family == 0x17 and "fma" in flags:
        if cpu.model < 0x30:  # Zen and Zen+ split 256-bit ops over 128-bit pipes
            return _x86("AMD Zen/Zen+ (2 x 128-bit FMA)", 16, flags, _AMD_GUIDE.format("17h"))
        return _x86("AMD Zen 2 (2 x 256-bit FMA)", 32, flags, _AMD_GUIDE.format("17h"))
    return None


# Arm Ltd (implementer 0x41) parts: (name, FP32 FLOP/cycle, guide). NEON is 128 bits wide
# (4 FP32 lanes); SVE on the V1 is 256 bits.
_ARM_PARTS: dict[int, tuple[str, int, str]] = {
    0xD08: ("Arm Cortex-A72 (2 x 128-bit FMA)", 16, "Cortex-A72"),
    0xD0B: ("Arm Cortex-A76 (2 x 128-bit FMA)", 16, "Cortex-A76"),
    0xD0C: ("Arm Neoverse N1 (2 x 128-bit FMA)", 16, "Neoverse N1"),
    0xD40: ("Arm Neoverse V1 (2 x 256-bit SVE FMA)", 32, "Neoverse V1"),
    0xD49: ("Arm Neoverse N2 (2 x 128-bit FMA)", 16, "Neoverse N2"),
    0xD4F: ("Arm Neoverse V2 (4 x 128-bit FMA)", 32, "Neoverse V2"),
    0xD84: ("Arm Neoverse V3 (4 x 128-bit FMA)", 32, "Neoverse V3"),
    0xD8E: ("Arm Neoverse N3 (2 x 128-bit FMA)", 16, "Neoverse N3"),
}
_ARM_LTD = 0x41


def _arm(cpu: CpuIdentity) -> CoreRates | None:
    part = _ARM_PARTS.get(cpu.model) if cpu.family == _ARM_LTD else None
    if part is None:
        return None
    name, fp32, guide = part
    # BF16 matrix instructions (BFMMLA) have rates not in this table; FP16 NEON has twice
    # the lanes of FP32.
    bf16 = None if "bf16" in cpu.flags else fp32
    fp16 = 2 * fp32 if "asimdhp" in cpu.flags else fp32
    return CoreRates(name, fp32, bf16, fp16, _ARM_GUIDE.format(guide))


def core_rates(cpu: CpuIdentity) -> tuple[CoreRates | None, str]:
    """The theoretical FLOP/cycle of one core of ``cpu``, or ``None`` and the reason."""
    if cpu.machine in ("aarch64", "arm64"):
        found = _arm(cpu)
        what = f"Arm implementer {cpu.family:#x} part {cpu.model:#x}"
    elif cpu.vendor == "GenuineIntel":
        found = _intel(cpu)
        what = f"Intel family {cpu.family} model {cpu.model:#x}"
    elif cpu.vendor == "AuthenticAMD":
        found = _amd(cpu)
        what = f"AMD family {cpu.family:#x} model {cpu.model:#x}"
    else:
        found, what = None, f"{cpu.vendor or cpu.machine or 'an unknown'} CPU"
    if found is None:
        return None, f"no FLOP/cycle figure for {what} ({cpu.model_name or 'no model name'})"
    return found, ""
