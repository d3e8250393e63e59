"""MFU of an 8192^3 bfloat16 matmul on the current CUDA device (needs a GPU).

Times ``a @ b`` with ``typedflops.benchmark`` (CUDA events, L2 flush, warm-up) and prints the
measurement with its MFU against the device table's dense bf16 peak. An H100 should reach
0.7 or more. Without CUDA it says so and exits 0 (nothing to measure).

Run: ``python benchmarks/gpu_matmul.py [n]``
"""

from __future__ import annotations

import sys

import torch
from jaxtyping import BFloat16
from torch import Tensor

from typedflops import benchmark, typed_flops


@typed_flops
def matmul(a: BFloat16[Tensor, "m k"], b: BFloat16[Tensor, "k n"]) -> BFloat16[Tensor, "m n"]:
    """``(m, k) @ (k, n) -> (m, n)``: 2*m*n*k FLOPs."""
    return a @ b


def main(n: int = 8192) -> None:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    print(torch.cuda.get_device_name(), f"n={n}")
    measured = benchmark(matmul, a, b, repeat=50)
    print(measured)
    print(f"MFU {measured.mfu}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8192)
