"""Tensors and memory: dtypes and their sizes, bytes, views vs copies, contiguity.

Run: ``python examples/ex01_tensors_and_memory.py``
"""

from __future__ import annotations

import torch

from typedflops.memory import model_memory, nbytes, same_storage
from typedflops.text import format_si, text_table


def main() -> None:
    """Print the size of each floating dtype, then what views and copies cost."""
    rows = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn):
        info = torch.finfo(dtype)
        x = torch.zeros(4, 8, 8, dtype=dtype)
        name = str(dtype).removeprefix("torch.")
        rows.append([name, str(dtype.itemsize), format_si(nbytes(x), "B"), f"{info.max:.4g}",
                     f"{info.eps:.3g}"])  # fmt: skip
    header = ["dtype", "bytes/element", "4x8x8 tensor", "max", "eps"]
    print(text_table(header, rows, right={1, 2, 3, 4}))
    print()

    x = torch.arange(6.0).reshape(2, 3)
    copy = x.T.contiguous()
    views = {"x[0]": x[0], "x.T": x.T, "x.view(3, 2)": x.view(3, 2), "x.T.contiguous()": copy}
    rows = [
        [label, str(same_storage(x, view)), str(view.is_contiguous()), format_si(nbytes(view), "B")]
        for label, view in views.items()
    ]
    header = ["of x = arange(6.0).reshape(2, 3)", "shares storage", "contiguous", "bytes"]
    print(text_table(header, rows, right={3}))
    print(f"(a view moves no bytes; x.T.contiguous() is a copy of {format_si(nbytes(copy), 'B')})")
    print()

    model = torch.nn.Linear(1024, 1024, bias=False)
    sizes = model_memory(model, "adam")
    print("training a 1024x1024 linear layer with Adam needs:")
    print(text_table(["part", "bytes"], [[k, format_si(v, "B")] for k, v in sizes.items()], {1}))


if __name__ == "__main__":
    main()
