"""The device table: every name string torch reports, tie-breaks, unknowns, overrides; the
theoretical CPU peak from fake /proc/cpuinfo and sysfs contents."""

from __future__ import annotations

import warnings

import pytest
import torch

from typedflops import devices
from typedflops.devices.gpus import GPU_TABLE, DeviceRecord
from typedflops.errors import SpecError

T = 1e12

# name string seen from torch.cuda.get_device_name -> (SKU, FP32, BF16, bandwidth), from the
# vendors' datasheets.
NAME_TO_EXPECTED = {
    "NVIDIA H100 80GB HBM3": ("H100 SXM5 80GB", 67 * T, 989.4 * T, 3.35 * T),
    "NVIDIA H100 PCIe": ("H100 PCIe", 51 * T, 756 * T, 2.0 * T),
    "NVIDIA H100 NVL": ("H100 NVL", 60 * T, 835.5 * T, 3.9 * T),
    "NVIDIA H200": ("H200 SXM", 67 * T, 989.4 * T, 4.8 * T),
    "NVIDIA A100-SXM4-40GB": ("A100 SXM4 40GB", 19.5 * T, 312 * T, 1.555 * T),
    "NVIDIA A100-SXM4-80GB": ("A100 SXM4 80GB", 19.5 * T, 312 * T, 2.039 * T),
    "NVIDIA A100-PCIE-40GB": ("A100 PCIe 40GB", 19.5 * T, 312 * T, 1.555 * T),
    "NVIDIA A100 80GB PCIe": ("A100 PCIe 80GB", 19.5 * T, 312 * T, 1.935 * T),
    "NVIDIA B200": ("B200", 75 * T, 2250 * T, 8.0 * T),
    "NVIDIA L4": ("L4", 30.3 * T, 121 * T, 0.30 * T),
    "NVIDIA L40S": ("L40S", 91.6 * T, 362.05 * T, 0.864 * T),
    "NVIDIA A10": ("A10", 31.2 * T, 125 * T, 0.60 * T),
    "Tesla T4": ("T4", 8.1 * T, None, 0.32 * T),
    "NVIDIA GeForce RTX 4090": ("GeForce RTX 4090", 82.6 * T, 165.2 * T, 1.008 * T),
    "NVIDIA GeForce RTX 3090": ("GeForce RTX 3090", 35.6 * T, 71 * T, 0.936 * T),
    "NVIDIA GeForce RTX 5090": ("GeForce RTX 5090", 104.8 * T, 209.5 * T, 1.792 * T),
    "Tesla V100-SXM2-16GB": ("V100 SXM2", 15.7 * T, None, 0.9 * T),
    "Tesla V100-SXM2-32GB": ("V100 SXM2", 15.7 * T, None, 0.9 * T),
    "Tesla V100-PCIE-16GB": ("V100 PCIe", 14 * T, None, 0.9 * T),
    "Tesla V100-PCIE-32GB": ("V100 PCIe", 14 * T, None, 0.9 * T),
    "NVIDIA A10G": ("A10G", 31.52 * T, 126.1 * T, 0.6 * T),
    "NVIDIA L40": ("L40", 90.5 * T, 181.05 * T, 0.864 * T),
    "AMD Instinct MI300X": ("MI300X", 163.4 * T, 1307.4 * T, 5.3 * T),
    "AMD Instinct MI250X": ("MI250X (one GCD)", 47.85 * T, 191.5 * T, 1.6384 * T),
    "AMD Instinct MI250": ("MI250 (one GCD)", 45.25 * T, 181.05 * T, 1.6384 * T),
}


@pytest.mark.parametrize("name", sorted(NAME_TO_EXPECTED))
@pytest.mark.parametrize("spelling", [str, str.lower, str.upper, lambda s: f"  {s}  "])
def test_every_name_string_gives_its_sku_and_figures(name: str, spelling: object) -> None:
    assert callable(spelling)
    spec = devices.lookup(spelling(name))
    sku, fp32, bf16, bandwidth = NAME_TO_EXPECTED[name]
    assert spec is not None
    assert spec.name == sku
    assert spec.peak_flops[torch.float32] == pytest.approx(fp32)
    assert spec.peak_flops.get(torch.bfloat16) == (None if bf16 is None else pytest.approx(bf16))
    assert spec.bandwidth == pytest.approx(bandwidth)
    assert spec.source and not spec.estimate
    assert spec.note == ""  # these names are not ambiguous


def test_l40s_is_never_the_l4() -> None:
    l40s, l4 = devices.lookup("NVIDIA L40S"), devices.lookup("NVIDIA L4")
    assert l40s is not None and l4 is not None
    assert (l40s.name, l4.name) == ("L40S", "L4")
    assert l40s.peak_flops[torch.bfloat16] == pytest.approx(362.05 * T)
    assert devices.lookup("nvidia l40s") == l40s
    l40 = devices.lookup("NVIDIA L40")  # neither the L40S nor the L4
    assert l40 is not None and l40.name == "L40"
    assert l40.peak_flops[torch.bfloat16] == pytest.approx(181.05 * T)
    assert devices.explain("NVIDIA L40").startswith("'NVIDIA L40' is the L40 (NVIDIA L40 GPU")


def test_a10g_is_not_the_a10() -> None:
    a10g, a10 = devices.lookup("NVIDIA A10G"), devices.lookup("NVIDIA A10")
    assert a10g is not None and a10 is not None
    assert (a10g.name, a10.name) == ("A10G", "A10")
    assert a10g.peak_flops[torch.float32] != a10.peak_flops[torch.float32]
    assert "72 SMs at its 1.71 GHz" in a10g.source


def test_v100_by_form_factor_and_the_v100s_is_not_a_v100() -> None:
    spec = devices.lookup("Tesla V100")
    assert spec is not None and spec.name == "V100 SXM2" and "V100 PCIe" in spec.note
    assert devices.lookup("Tesla V100S-PCIE-32GB") is None
    assert devices.lookup("Tesla V100-SXM3-32GB") is None  # a token no record allows


def test_mi250x_name_rocm_reports_is_one_gcd_of_the_higher_figures() -> None:
    spec = devices.lookup("AMD Instinct MI250X/MI250")
    assert spec is not None and spec.name == "MI250X (one GCD)"
    assert "MI250 (one GCD)" in spec.note and "never overstated" in spec.note
    assert spec.bandwidth == pytest.approx(3.2768 * T / 2)
    assert spec.peak_flops[torch.float16] == pytest.approx(383 * T / 2)
    assert torch.float8_e4m3fn not in spec.peak_flops and spec.tf32_flops is None


def test_amd_names_need_their_own_tokens() -> None:
    mi300x = devices.lookup("AMD Instinct MI300X VF")  # the SR-IOV function of a whole GPU
    assert mi300x is not None and mi300x.name == "MI300X" and mi300x.source.startswith("AMD ")
    assert devices.peak_flops(torch.float32, mi300x, tf32=True) == pytest.approx(653.7 * T)
    for name in ["AMD Instinct MI300A", "AMD Instinct MI210", "AMD Radeon RX 7900 XTX"]:
        assert devices.lookup(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GeForce RTX 4090 D",  # a cut-down SKU
        "NVIDIA GeForce RTX 4090 Laptop GPU",  # a different chip
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA H200 NVL",
        "NVIDIA GH200 480GB",
        "NVIDIA A100-SXM4-64GB",
        "NVIDIA RTX A6000",
        "NVIDIA L40G",
        "AMD Instinct MI325X",
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
        "",
    ],
)
def test_unknown_names_give_none_and_a_reason(name: str) -> None:
    assert devices.lookup(name) is None
    assert name in devices.explain(name)


@pytest.mark.parametrize(
    ("name", "sku", "alternatives"),
    [
        ("NVIDIA H100", "H100 SXM5 80GB", ["H100 PCIe", "H100 NVL"]),
        ("NVIDIA H100 80GB", "H100 SXM5 80GB", ["H100 PCIe"]),
        ("NVIDIA A100", "A100 SXM4 80GB", ["A100 SXM4 40GB", "A100 PCIe 80GB"]),
        ("NVIDIA A100 PCIe", "A100 PCIe 80GB", ["A100 PCIe 40GB"]),
        ("NVIDIA A100-SXM4", "A100 SXM4 80GB", ["A100 SXM4 40GB"]),
    ],
)
def test_ambiguous_names_take_the_highest_figures_and_say_so(
    name: str, sku: str, alternatives: list[str]
) -> None:
    spec = devices.lookup(name)
    assert spec is not None and spec.name == sku
    assert all(other in spec.note for other in alternatives)
    assert "never overstated" in devices.explain(name)


def test_tie_break_on_a_synthetic_table() -> None:
    def record(sku: str, tokens: str, fp32: float, bandwidth: float) -> DeviceRecord:
        return DeviceRecord(
            sku, "x1", frozenset({"x1", *tokens.split()}), {"float32": fp32}, bandwidth, "test"
        )

    slow = record("X1 slow", "a", 1.0, 9.0)
    fast = record("X1 fast", "b", 2.0, 1.0)
    wide = record("X1 wide", "c", 2.0, 3.0)
    assert devices._match("X1", [slow, fast, wide])[0] is wide
    assert devices._match("X1 b", [slow, fast, wide])[0] is fast
    assert devices._match("X1 a b", [slow, fast, wide])[0] is None


def test_table_is_complete_data() -> None:
    skus = [record.sku for record in GPU_TABLE]
    assert len(skus) == len(set(skus))
    for record in GPU_TABLE:
        assert record.source.startswith(("NVIDIA ", "AMD "))
        assert record.bandwidth_tbs > 0
        assert all(v is None or v > 0 for v in record.tflops.values())
        assert record.model in record.allowed


def test_float8_and_float64_figures() -> None:
    h100 = devices.lookup("NVIDIA H100 80GB HBM3")
    a100 = devices.lookup("NVIDIA A100-SXM4-80GB")
    assert h100 is not None and a100 is not None
    assert h100.peak_flops[torch.float8_e4m3fn] == pytest.approx(1979 * T)
    assert h100.peak_flops[torch.float8_e5m2] == pytest.approx(1979 * T)
    assert h100.peak_flops[torch.float64] == pytest.approx(67 * T)
    assert torch.float8_e4m3fn not in a100.peak_flops  # Ampere has no FP8


def test_tf32_only_when_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    a100 = devices.lookup("NVIDIA A100-SXM4-80GB")
    t4 = devices.lookup("Tesla T4")
    assert a100 is not None and t4 is not None
    assert devices.peak_flops(torch.float32, a100, tf32=False) == pytest.approx(19.5 * T)
    assert devices.peak_flops(torch.float32, a100, tf32=True) == pytest.approx(156 * T)
    assert devices.peak_flops(torch.float32, t4, tf32=True) == pytest.approx(8.1 * T)
    assert devices.peak_flops(torch.bfloat16, a100, tf32=True) == pytest.approx(312 * T)
    monkeypatch.setattr(devices, "tf32_enabled", lambda: True)
    assert devices.peak_flops(torch.float32, a100) == pytest.approx(156 * T)
    monkeypatch.setattr(devices, "tf32_enabled", lambda: False)
    assert devices.peak_flops(torch.float32, a100) == pytest.approx(19.5 * T)


def test_tf32_follows_torch_flags() -> None:
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    assert devices.tf32_enabled() is False  # torch's default is IEEE float32
    try:
        matmul.fp32_precision = "tf32"
        assert devices.tf32_enabled() is True
        matmul.fp32_precision = "ieee"
        assert devices.tf32_enabled() is False
    finally:
        matmul.fp32_precision = before
    assert devices.tf32_enabled() is False


def test_cuda_device_uses_the_name_torch_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA L40S")
    spec = devices.device_spec()
    assert spec is not None and spec.name == "L40S"
    assert devices.peak_flops(torch.bfloat16) == pytest.approx(362.05 * T)
    assert devices.peak_flops(torch.float16, "cuda:0") == pytest.approx(362.05 * T)
    assert devices.bandwidth(0) == pytest.approx(0.864 * T)


def test_unknown_cuda_device_gives_none_and_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA Mystery 9000")
    monkeypatch.setattr(devices, "_warned", set())
    with pytest.warns(UserWarning, match="Mystery 9000"):
        assert devices.peak_flops(torch.bfloat16, "cuda") is None
    assert devices.device_spec("cuda:0") is None


def test_missing_dtype_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    t4 = devices.lookup("Tesla T4")
    monkeypatch.setattr(devices, "_warned", set())
    with pytest.warns(UserWarning, match="no torch.bfloat16 figure"):
        assert devices.peak_flops(torch.bfloat16, t4) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert devices.peak_flops(torch.bfloat16, t4) is None


def test_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    h100 = devices.lookup("NVIDIA H100 80GB HBM3")
    monkeypatch.setenv(devices.ENV_PEAK_FLOPS, "123e12")
    assert devices.peak_flops(torch.bfloat16, h100) == 123e12
    assert devices.peak_flops(torch.bfloat16, "meta") == 123e12  # even without a spec
    monkeypatch.setenv(devices.ENV_PEAK_FLOPS, "1e12, torch.bfloat16=2e12")
    assert devices.peak_flops(torch.bfloat16, h100) == 2e12
    assert devices.peak_flops(torch.float32, h100) == 1e12
    monkeypatch.setenv(devices.ENV_PEAK_FLOPS, "bfloat16=2e12")
    assert devices.peak_flops(torch.float32, h100, tf32=False) == pytest.approx(67 * T)


@pytest.mark.parametrize("raw", ["fast", "-1", "nan", "inf", "bfloat61=1e12", "bfloat16=x"])
def test_bad_env_override_is_a_spec_error(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(devices.ENV_PEAK_FLOPS, raw)
    with pytest.raises(SpecError, match=devices.ENV_PEAK_FLOPS):
        devices.peak_flops(torch.float32, "cpu")


def test_resolve_is_the_one_way_from_a_device_to_its_figures() -> None:
    h100 = devices.resolve("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.name == "H100 SXM5 80GB"
    assert devices.resolve(h100) is h100
    assert devices.resolve("H100 SXM") == h100
    assert (h100.memory, devices.resolve("H200").memory) == (80e9, 141e9)
    assert "80GB HBM3" in h100.memory_source
    assert devices.resolve("Tesla V100-SXM2-16GB").memory is None  # no figure: never a guess
    with pytest.raises(SpecError, match=r"unknown device 'H1000'.*known: \"H100 SXM5 80GB\""):
        devices.resolve("H1000")
    with pytest.raises(SpecError, match=r"no figures for device 'meta'"):
        devices.resolve("meta")


def test_every_gpu_with_a_memory_figure_cites_it() -> None:
    for record in GPU_TABLE:
        assert (record.memory_gb is None) == (record.memory_source == ""), record.sku
        spec = devices._spec_from_record(record)
        assert spec.memory == (None if record.memory_gb is None else record.memory_gb * 1e9)
        assert spec.memory_source == record.memory_source
