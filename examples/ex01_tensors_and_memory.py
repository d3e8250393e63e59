"""Tensors and memory: dtypes and their sizes, bytes, views vs copies, contiguity.

Run: ``python examples/ex01_tensors_and_memory.py``
"""

from __future__ import annotations

import torch

from typedflops.memory import model_memory, nbytes, same_storage


def main() -> None:
    """Print the size of each floating dtype, then what views and copies cost."""
    print("dtype      bytes  max           eps")
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn):
        info = torch.finfo(dtype)
        x = torch.zeros(4, 8, 8, dtype=dtype)
        print(f"{str(dtype)[6:]:<10} {nbytes(x):>5}  {info.max:<12.4g}  {info.eps:.3g}")

    x = torch.arange(6.0).reshape(2, 3)
    views = {"x[0]": x[0], "x.T": x.T, "x.view(3, 2)": x.view(3, 2)}
    for label, view in views.items():
        print(
            f"{label:<14} shares storage with x: {same_storage(x, view)}, "
            f"contiguous: {view.is_contiguous()}"
        )
    copy = x.T.contiguous()
    print(
        f"x.T.contiguous() shares storage: {same_storage(x, copy)} (a copy of {nbytes(copy)} bytes)"
    )

    model = torch.nn.Linear(1024, 1024, bias=False)
    print("training a 1024x1024 linear layer with Adam needs", model_memory(model, "adam"))


if __name__ == "__main__":
    main()
