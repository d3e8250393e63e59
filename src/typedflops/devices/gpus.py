"""The promised dense peaks of GPUs, as data: one record per SKU, each with its source.

Figures are in TFLOP/s for peaks and TB/s for bandwidth (``typedflops.devices`` turns them
into FLOP/s and bytes/s), each from the vendor's datasheet or architecture whitepaper named
in its ``source``. Datacenter datasheets print tensor-core figures with sparsity; the figures
here are dense (half). GeForce cards run BF16/FP16 with FP32 accumulate (what PyTorch uses) at
half the FP16-accumulate rate, and the figures here are those. ``None`` means the SKU has no
such rate (T4 and V100 have no TF32 or BF16 tensor cores, Ampere has no FP8). AMD figures
are the matrix-core rates; an MI250X or MI250 is two GCDs that ROCm shows as two devices, so
its records are one GCD, half the board's datasheet figures.

An NVIDIA record's ``capability`` is its compute capability (the ``sm`` version
``torch.cuda.get_device_capability`` reports), from NVIDIA's list of CUDA GPUs and their
compute capabilities (developer.nvidia.com/cuda-gpus): Volta 7.0, Turing 7.5, A100 8.0,
the GA102 cards (A10, A10G, RTX 3090) 8.6, Ada (L4, L40, L40S, RTX 4090) 8.9, Hopper 9.0,
B200 10.0, RTX 5090 12.0. AMD records have none: ROCm reports its gfx version there,
which torch's choice of kernels does not read as NVIDIA's.

Matching is by tokens of the ``torch.cuda.get_device_name`` string, never by substring: a
record's ``model`` token must be in the name and every other token of the name must be one the
record allows (``allowed``). The brand tokens in ``BRAND_TOKENS`` are ignored.

>>> [record.sku for record in GPU_TABLE if record.model == "a100"]
['A100 SXM4 80GB', 'A100 SXM4 40GB', 'A100 PCIe 80GB', 'A100 PCIe 40GB']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["BRAND_TOKENS", "GPU_TABLE", "DeviceRecord", "Links"]

#: Tokens that name a brand, not a SKU; dropped from a device name before matching.
BRAND_TOKENS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct"})

_DATASHEET_NOTE = "dense = half the sparse tensor-core figures"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet"
_A100_NOTE = f"FP64 on tensor cores; {_DATASHEET_NOTE}"
_Rate = float | None
_GEFORCE_NOTE = "BF16/FP16 with FP32 accumulate"
_V100 = "NVIDIA Tesla V100 GPU datasheet"
_V100_NOTE = "tensor-core FP16 with FP32 accumulate; Volta has no TF32 or BF16"
_MI250 = (
    "datasheet, one GCD: half the board's figures; FP64/FP32 on matrix cores; CDNA 2 has "
    "no TF32 or FP8"
)


@dataclass(frozen=True)
class Links:
    """How a GPU talks to others: NVLink to the GPUs of its node (``nvlink_gbs``, GB/s both
    directions together, as datasheets print it), InfiniBand out of the node, one adapter
    per GPU (``infiniband_gbits``, Gb/s each way), ``gpus_per_node``, and the sources."""

    nvlink_gbs: float
    infiniband_gbits: float
    gpus_per_node: int
    source: str


_DGX_H100 = "NVIDIA DGX H100/H200 datasheet: 8x ConnectX-7 VPI, 400Gb/s InfiniBand per GPU"
_DGX_A100 = "NVIDIA DGX A100 datasheet: 8x ConnectX-6 VPI, 200Gb/s HDR InfiniBand per GPU"
_DGX_B200 = "NVIDIA DGX B200 datasheet: 8x ConnectX-7 VPI, 400Gb/s InfiniBand per GPU"


@dataclass(frozen=True)
class DeviceRecord:
    """One SKU: its canonical name, the tokens its device names may carry, figures, source.

    ``tflops`` maps a rate name ("float64", "float32", "tf32", "bfloat16", "float16",
    "float8") to dense TFLOP/s; ``bandwidth_tbs`` is memory bandwidth in TB/s; ``memory_gb``
    the memory in GB (10^9 bytes) as the datasheet prints it, cited by ``memory_source``;
    ``links`` how the GPU talks to others in NVIDIA's 8-GPU systems (:class:`Links`; None for
    PCIe and NVL cards, bridged in pairs and networked as their server is); ``capability``
    the compute capability (major, minor) of an NVIDIA GPU, None for AMD's.
    HBM parts hold a little more than the printed figure read as 10^9 bytes (an "80GB" H100
    reports 85.0e9 bytes to torch), so a plan that fits this figure fits the device's
    allocatable memory, less what the CUDA context and other processes take.
    """

    sku: str
    model: str
    allowed: frozenset[str]
    tflops: Mapping[str, float | None]
    bandwidth_tbs: float
    source: str
    memory_gb: float | None = None
    memory_source: str = ""
    links: Links | None = None
    capability: tuple[int, int] | None = None


def _record(
    sku: str,
    model: str,
    extra_tokens: str,
    rates: tuple[_Rate, _Rate, _Rate, _Rate, _Rate, _Rate],
    bandwidth_tbs: float,
    source: str,
    *,
    memory: tuple[float, str] | None = None,
    links: Links | None = None,
    capability: tuple[int, int] | None = None,
) -> DeviceRecord:
    fp64, fp32, tf32, bf16, fp16, fp8 = rates
    tflops = {
        "float64": fp64,
        "float32": fp32,
        "tf32": tf32,
        "bfloat16": bf16,
        "float16": fp16,
        "float8": fp8,
    }
    return DeviceRecord(
        sku=sku,
        model=model,
        allowed=frozenset({model, *extra_tokens.split()}),
        tflops=MappingProxyType(tflops),
        bandwidth_tbs=bandwidth_tbs,
        source=source,
        memory_gb=None if memory is None else memory[0],
        memory_source="" if memory is None else memory[1],
        links=links,
        capability=capability,
    )


#: Rates in the order FP64, FP32, TF32, BF16, FP16, FP8 (TFLOP/s, dense); bandwidth in TB/s.
GPU_TABLE: tuple[DeviceRecord, ...] = (
    _record(
        "H100 SXM5 80GB", "h100", "sxm sxm5 80gb hbm3",
        (67, 67, 494.7, 989.4, 989.4, 1979), 3.35,
        f"NVIDIA H100 Tensor Core GPU datasheet, SXM5 (FP64 on tensor cores; {_DATASHEET_NOTE})",
        memory=(80, "NVIDIA H100 Tensor Core GPU datasheet, SXM5: 80GB HBM3"),
        links=Links(
            900, 400, 8,
            f"NVIDIA H100 Tensor Core GPU datasheet, SXM5: NVLink 900GB/s; {_DGX_H100}",
        ),
        capability=(9, 0),
    ),
    _record(
        "H100 PCIe", "h100", "pcie 80gb",
        (51, 51, 378, 756, 756, 1513), 2.0,
        f"NVIDIA H100 Tensor Core GPU datasheet, PCIe ({_DATASHEET_NOTE})",
        memory=(80, "NVIDIA H100 Tensor Core GPU datasheet, PCIe: 80GB HBM2e"),
        capability=(9, 0),
    ),
    _record(
        "H100 NVL", "h100", "nvl 94gb",
        (60, 60, 417.5, 835.5, 835.5, 1670.5), 3.9,
        f"NVIDIA H100 Tensor Core GPU datasheet, NVL ({_DATASHEET_NOTE})",
        memory=(94, "NVIDIA H100 Tensor Core GPU datasheet, NVL: 94GB HBM3"),
        capability=(9, 0),
    ),
    _record(
        "H200 SXM", "h200", "sxm 141gb hbm3e",
        (67, 67, 494.7, 989.4, 989.4, 1979), 4.8,
        f"NVIDIA H200 Tensor Core GPU datasheet, SXM ({_DATASHEET_NOTE})",
        memory=(141, "NVIDIA H200 Tensor Core GPU datasheet: 141GB HBM3e"),
        links=Links(
            900, 400, 8,
            f"NVIDIA H200 Tensor Core GPU datasheet: NVLink 900GB/s; {_DGX_H100}",
        ),
        capability=(9, 0),
    ),
    _record(
        "A100 SXM4 80GB", "a100", "sxm sxm4 80gb",
        (19.5, 19.5, 156, 312, 312, None), 2.039,
        f"{_A100}, SXM4 80GB ({_A100_NOTE})",
        memory=(80, f"{_A100}: 80GB HBM2e"),
        links=Links(
            600, 200, 8,
            f"{_A100}, SXM: NVLink 600GB/s; {_DGX_A100}",
        ),
        capability=(8, 0),
    ),
    _record(
        "A100 SXM4 40GB", "a100", "sxm sxm4 40gb",
        (19.5, 19.5, 156, 312, 312, None), 1.555,
        f"{_A100}, SXM4 40GB ({_A100_NOTE})",
        memory=(40, f"{_A100}: 40GB HBM2"),
        links=Links(
            600, 200, 8,
            f"{_A100}, SXM: NVLink 600GB/s; {_DGX_A100}",
        ),
        capability=(8, 0),
    ),
    _record(
        "A100 PCIe 80GB", "a100", "pcie 80gb",
        (19.5, 19.5, 156, 312, 312, None), 1.935,
        f"{_A100}, PCIe 80GB ({_A100_NOTE})",
        memory=(80, f"{_A100}: 80GB HBM2e"),
        capability=(8, 0),
    ),
    _record(
        "A100 PCIe 40GB", "a100", "pcie 40gb",
        (19.5, 19.5, 156, 312, 312, None), 1.555,
        f"{_A100}, PCIe 40GB ({_A100_NOTE})",
        memory=(40, f"{_A100}: 40GB HBM2"),
        capability=(8, 0),
    ),
    _record(
        "B200", "b200", "sxm",
        (37, 75, 1100, 2250, 2250, 4500), 8.0,
        f"NVIDIA Blackwell datasheet, B200 ({_DATASHEET_NOTE})",
        memory=(180, "NVIDIA DGX B200 datasheet: 1,440GB HBM3e for 8 GPUs (HGX B200)"),
        links=Links(
            1800, 400, 8,
            f"NVIDIA Blackwell datasheet, B200: NVLink 1.8TB/s; {_DGX_B200}",
        ),
        capability=(10, 0),
    ),
    _record(
        "L4", "l4", "",
        (0.47, 30.3, 60, 121, 121, 242.5), 0.30,
        "NVIDIA Ada Lovelace architecture whitepaper, L4 (FP64 approximate; dense)",
        memory=(24, "NVIDIA L4 Tensor Core GPU datasheet: 24GB GDDR6"),
        capability=(8, 9),
    ),
    _record(
        "L40S", "l40s", "",
        (1.4, 91.6, 183, 362.05, 362.05, 733), 0.864,
        f"NVIDIA L40S datasheet (FP64 approximate; {_DATASHEET_NOTE})",
        memory=(48, "NVIDIA L40S datasheet: 48GB GDDR6 with ECC"),
        capability=(8, 9),
    ),
    _record(
        "A10", "a10", "",
        (0.49, 31.2, 62.5, 125, 125, None), 0.60,
        f"NVIDIA A10 Tensor Core GPU datasheet (FP64 approximate; {_DATASHEET_NOTE})",
        memory=(24, "NVIDIA A10 Tensor Core GPU datasheet: 24GB GDDR6"),
        capability=(8, 6),
    ),
    _record(
        "T4", "t4", "",
        (0.25, 8.1, None, None, 65, None), 0.32,
        "NVIDIA T4 Tensor Core GPU datasheet (Turing: no TF32, BF16 or FP8 tensor cores)",
        memory=(16, "NVIDIA T4 Tensor Core GPU datasheet: 16GB GDDR6"),
        capability=(7, 5),
    ),
    _record(
        "V100 SXM2", "v100", "sxm2 16gb 32gb",
        (7.8, 15.7, None, None, 125, None), 0.900,
        f"{_V100}, SXM2 ({_V100_NOTE})",
        capability=(7, 0),
    ),
    _record(
        "V100 PCIe", "v100", "pcie 16gb 32gb",
        (7, 14, None, None, 112, None), 0.900,
        f"{_V100}, PCIe ({_V100_NOTE})",
        capability=(7, 0),
    ),
    _record(
        "A10G", "a10g", "",
        (0.49, 31.52, 63.0, 126.1, 126.1, None), 0.60,
        "NVIDIA Ampere GA102 GPU architecture whitepaper: per-SM rates (128 FP32 lanes, 4 "
        "tensor cores of 128 dense FP16/BF16 FMA a clock) x the A10G's 72 SMs at its 1.71 GHz "
        "boost clock; NVIDIA publishes no A10G datasheet (AWS EC2 G5 GPU)",
        memory=(24, "Amazon EC2 G5 instance types: 24 GB of GPU memory per A10G"),
        capability=(8, 6),
    ),
    _record(
        "L40", "l40", "",
        (1.41, 90.5, 90.5, 181.05, 181.05, 362), 0.864,
        f"NVIDIA L40 GPU datasheet (FP64 approximate, 1/64 of FP32; {_DATASHEET_NOTE})",
        memory=(48, "NVIDIA L40 GPU datasheet: 48GB GDDR6 with ECC"),
        capability=(8, 9),
    ),
    _record(
        "MI300X", "mi300x", "oam vf",
        (163.4, 163.4, 653.7, 1307.4, 1307.4, 2614.9), 5.3,
        "AMD Instinct MI300X accelerator datasheet (FP64/FP32 on matrix cores; dense = half "
        "the structured-sparsity figures; one device is the whole GPU in SPX partition mode)",
        memory=(192, "AMD Instinct MI300X accelerator datasheet: 192GB HBM3"),
    ),
    _record(
        "MI250X (one GCD)", "mi250x", "mi250",
        (47.85, 47.85, None, 191.5, 191.5, None), 1.6384,
        f"AMD Instinct MI250X {_MI250}",
        memory=(64, "AMD Instinct MI250X datasheet: 128GB HBM2e over two GCDs"),
    ),
    _record(
        "MI250 (one GCD)", "mi250", "mi250x",
        (45.25, 45.25, None, 181.05, 181.05, None), 1.6384,
        f"AMD Instinct MI250 {_MI250}",
        memory=(64, "AMD Instinct MI250 datasheet: 128GB HBM2e over two GCDs"),
    ),
    _record(
        "GeForce RTX 4090", "4090", "rtx",
        (1.29, 82.6, 82.6, 165.2, 165.2, 330.3), 1.008,
        f"NVIDIA Ada Lovelace architecture whitepaper, RTX 4090 ({_GEFORCE_NOTE})",
        memory=(24, "NVIDIA Ada Lovelace architecture whitepaper: 24GB GDDR6X"),
        capability=(8, 9),
    ),
    _record(
        "GeForce RTX 3090", "3090", "rtx",
        (0.56, 35.6, 35.6, 71, 71, None), 0.936,
        f"NVIDIA Ampere GA102 GPU architecture whitepaper, RTX 3090 ({_GEFORCE_NOTE})",
        memory=(24, "NVIDIA Ampere GA102 GPU architecture whitepaper: 24GB GDDR6X"),
        capability=(8, 6),
    ),
    _record(
        "GeForce RTX 5090", "5090", "rtx",
        (1.64, 104.8, 104.8, 209.5, 209.5, 419), 1.792,
        f"NVIDIA RTX Blackwell GPU architecture whitepaper, RTX 5090 ({_GEFORCE_NOTE})",
        memory=(32, "NVIDIA RTX Blackwell GPU architecture whitepaper: 32GB GDDR7"),
        capability=(12, 0),
    ),
)  # fmt: skip
