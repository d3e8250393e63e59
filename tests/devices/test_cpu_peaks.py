"""The theoretical CPU peak: cores in use x clock x FLOP/cycle, from fake /proc/cpuinfo, sysfs
and lscpu contents, so every case runs on any machine and gives the same figures every run."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from typedflops import devices
from typedflops.devices import cpu
from typedflops.devices.cpu_table import CpuIdentity, core_rates

XEON_6248 = cpu.SAMPLE_CPUINFO
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp sve bf16
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1

processor\t: 1
"""


def test_parse_x86_cpuinfo() -> None:
    info = cpu.parse_cpuinfo(XEON_6248)
    assert info is not None
    assert info.identity == CpuIdentity(
        vendor="GenuineIntel",
        family=6,
        model=85,
        machine="x86_64",
        flags=frozenset({"fpu", "sse2", "avx", "fma", "avx2", "avx512f"}),
        model_name="Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
    )
    assert info.threads_per_core == 2
    assert cpu.parse_cpuinfo("processor : 0\n") is None


def test_parse_arm_cpuinfo() -> None:
    info = cpu.parse_cpuinfo(GRAVITON3)
    assert info is not None
    assert (info.identity.family, info.identity.model) == (0x41, 0xD40)
    assert info.identity.machine == "aarch64" and "sve" in info.identity.flags
    rates, _ = core_rates(info.identity)
    assert rates is not None and rates.name.startswith("Arm Neoverse V1")
    assert (rates.fp32, rates.fp64, rates.bf16, rates.fp16) == (32, 16, None, 64)
    assert rates.source == "Arm Neoverse V1 Software Optimization Guide"


def _x86(vendor: str, family: int, model: int, flags: str, name: str = "") -> CpuIdentity:
    return CpuIdentity(vendor, family, model, "x86_64", frozenset(flags.split()), name)


@pytest.mark.parametrize(
    ("identity", "fp32", "bf16", "fp16"),
    [
        # Sapphire Rapids: AVX-512 with 2 FMA units, AMX tiles for BF16/FP16
        (_x86("GenuineIntel", 6, 0x8F, "avx2 fma avx512f avx512_fp16 amx_bf16"), 64, 1024, 128),
        (_x86("GenuineIntel", 6, 0xCF, "avx2 fma avx512f"), 64, 64, 64),  # Emerald Rapids
        (_x86("GenuineIntel", 6, 0x55, "avx512f", "Intel(R) Xeon(R) Gold 6248 CPU"), 64, 64, 64),
        (_x86("GenuineIntel", 6, 0x55, "avx512f", "Intel(R) Xeon(R) Gold 5218 CPU"), 32, 32, 32),
        (_x86("GenuineIntel", 6, 0x55, "avx512f", "Intel(R) Xeon(R) Gold 5122 CPU"), 64, 64, 64),
        (_x86("GenuineIntel", 6, 0x55, "avx512f", "Intel(R) Xeon(R) Silver 4214"), 32, 32, 32),
        (_x86("GenuineIntel", 6, 0x8C, "avx2 fma avx512f"), 32, 32, 32),  # Tiger Lake
        (_x86("GenuineIntel", 6, 0x3C, "avx avx2 fma"), 32, 32, 32),  # Haswell
        (_x86("GenuineIntel", 6, 0x2A, "avx"), 16, 16, 16),  # Sandy Bridge
        (_x86("AuthenticAMD", 0x1A, 0x44, "avx2 fma avx512f avx512_bf16"), 64, 128, 64),  # Zen 5
        (_x86("AuthenticAMD", 0x19, 0x61, "avx2 fma avx512f avx512_bf16"), 32, 64, 32),  # Zen 4
        (_x86("AuthenticAMD", 0x19, 0x21, "avx2 fma"), 32, 32, 32),  # Zen 3
        (_x86("AuthenticAMD", 0x17, 0x31, "avx2 fma"), 32, 32, 32),  # Zen 2
        (_x86("AuthenticAMD", 0x17, 0x01, "avx2 fma"), 16, 16, 16),  # Zen 1
    ],
)
def test_flop_per_cycle_table(identity: CpuIdentity, fp32: int, bf16: int, fp16: int) -> None:
    rates, reason = core_rates(identity)
    assert rates is not None and reason == ""
    assert (rates.fp32, rates.fp64, rates.bf16, rates.fp16) == (fp32, fp32 // 2, bf16, fp16)
    assert rates.source.startswith(("Intel 64 and IA-32", "Software Optimization Guide for AMD"))


@pytest.mark.parametrize(
    ("identity", "reason"),
    [
        (_x86("GenuineIntel", 6, 0x1A, "sse2 sse4_2", "Intel(R) Core(TM) i7 920"), "model 0x1a"),
        (_x86("HygonGenuine", 0x18, 0x01, "avx2 fma"), "HygonGenuine CPU"),
        (_x86("AuthenticAMD", 0x15, 0x02, "avx fma"), "AMD family 0x15"),
        (CpuIdentity("ARM", 0x61, 0x22, "aarch64", frozenset({"asimd"})), "implementer 0x61"),
    ],
)
def test_cores_without_a_figure_give_none_and_say_which(identity: CpuIdentity, reason: str) -> None:
    rates, why = core_rates(identity)
    assert rates is None
    assert why.startswith("no FLOP/cycle figure for ") and reason in why


def _sysfs(root: Path, khz: int | None) -> Path:
    freq = root / "cpu0" / "cpufreq"
    freq.mkdir(parents=True)
    if khz is not None:
        (freq / "cpuinfo_max_freq").write_text(f"{khz}\n")
    return root


def test_clock_from_sysfs_first(tmp_path: Path) -> None:
    sys_cpu = _sysfs(tmp_path, 3_700_000)
    hz, how = cpu.max_clock_hz("Foo @ 2.50GHz", sys_cpu, lscpu=lambda: "CPU max MHz: 9999.0")
    assert hz == 3.7e9 and how.startswith("maximum clock, ") and "cpuinfo_max_freq" in how


def test_clock_from_lscpu_then_the_model_name(tmp_path: Path) -> None:
    sys_cpu = _sysfs(tmp_path, None)
    lscpu = "Model name:  Foo\nCPU max MHz:                     4500.0000\n"
    assert cpu.max_clock_hz("Foo", sys_cpu, lscpu=lambda: lscpu) == (4.5e9, "maximum clock, lscpu")
    hz, how = cpu.max_clock_hz(
        "Intel(R) Core(TM) i7-8700K CPU @ 3.70GHz", sys_cpu, lscpu=lambda: "CPU MHz: 800.0"
    )
    assert hz == pytest.approx(3.7e9) and how.startswith("nominal clock in the model name")


def test_no_clock_is_no_peak_and_a_reason(tmp_path: Path) -> None:
    hz, reason = cpu.max_clock_hz("Intel(R) Xeon(R) Processor", tmp_path, lscpu=lambda: "")
    assert hz is None
    assert reason == (
        f"the CPU's clock is unknown: no {tmp_path}/cpu0/cpufreq/cpuinfo_max_freq, no 'CPU max "
        "MHz' from lscpu, and no '@ ...GHz' in the model name 'Intel(R) Xeon(R) Processor'"
    )


@pytest.fixture
def fake_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, object]]:
    """This machine replaced by a 2.5 GHz Xeon Gold 6248 with 4 physical cores (no bandwidth
    measurement); ``clock`` may be set to None to take the clock away."""
    state: dict[str, object] = {"clock": 2.5e9}
    info = cpu.parse_cpuinfo(XEON_6248)
    monkeypatch.setattr(cpu, "cpu_info", lambda: (info, ""))
    monkeypatch.setattr(cpu, "physical_cores", lambda threads_per_core: 4)
    monkeypatch.setattr(cpu, "measured_bandwidth", lambda threads: (20e9, 64 << 20))

    def clock(model_name: str) -> tuple[float | None, str]:
        hz = state["clock"]
        assert hz is None or isinstance(hz, float)
        return (hz, "maximum clock, test") if hz else (None, "the CPU's clock is unknown: test")

    monkeypatch.setattr(cpu, "max_clock_hz", clock)
    cpu._core.cache_clear()
    yield state
    cpu._core.cache_clear()


@pytest.mark.parametrize(("threads", "cores"), [(1, 1), (2, 2), (4, 4), (8, 4)])
def test_peak_counts_the_cores_torch_uses(
    fake_cpu: dict[str, object], threads: int, cores: int
) -> None:
    peaks = cpu.cpu_peaks(threads)
    assert peaks is not None and peaks.cores == cores and peaks.missing == ""
    assert peaks.peak_flops[torch.float32] == cores * 2.5e9 * 64
    assert peaks.peak_flops[torch.float64] == cores * 2.5e9 * 32
    assert peaks.source.startswith(
        f"theoretical: {cores} cores (torch threads) x 2.50 GHz (maximum clock, test) x 64 FP32 "
        "FLOP/cycle, Intel Xeon Skylake-SP/Cascade Lake (AVX-512, 2 FMA units)"
    )
    assert peaks.source.endswith("; bandwidth measured: best of 10 copies of 64 MiB")
    assert cpu.cpu_peaks(threads) == peaks  # the same figures every time


def test_the_default_is_torch_s_thread_count(fake_cpu: dict[str, object]) -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = devices.cpu_spec()
        assert one is not None and one.cores == 1
        assert devices.peak_flops(torch.float32, "cpu") == 2.5e9 * 64
    finally:
        torch.set_num_threads(before)


def test_unknown_clock_gives_a_spec_without_peaks(
    fake_cpu: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_cpu["clock"] = None
    spec = devices.cpu_spec(2)
    assert spec is not None and spec.peak_flops == {} and spec.bandwidth == 20e9
    assert spec.missing == "the CPU's clock is unknown: test"
    monkeypatch.setattr(devices, "_warned", set())
    with pytest.warns(UserWarning, match="has no torch.float32 figure .the CPU's clock is unknown"):
        assert devices.peak_flops(torch.float32, spec) is None
    figure, reason = devices.peak_source(torch.float32, spec)
    assert figure is None and "clock is unknown" in reason
    monkeypatch.setenv(devices.ENV_PEAK_FLOPS, "float32=1e11")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert devices.peak_flops(torch.float32, spec) == 1e11  # the override still applies


def test_this_machine_never_invents_a_peak() -> None:
    spec = devices.cpu_spec()
    if spec is None:  # no /proc/cpuinfo: nothing to check
        return
    assert spec.kind == "cpu" and spec.cores is not None and spec.cores >= 1
    assert (spec.peak_flops == {}) == bool(spec.missing)
    if spec.peak_flops:
        assert spec.source.startswith("theoretical: ")
        assert spec.peak_flops[torch.float64] * 2 == spec.peak_flops[torch.float32]
    assert spec.bandwidth is not None and "bandwidth measured" in spec.source
