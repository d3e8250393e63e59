"""FLOPs of ``torch._grouped_mm`` (``F.grouped_mm``), the kernel of mixture-of-experts
layers: one matrix product per group (expert), the groups' extents given by ``offs``.

The groups cover the first ``offs[-1]`` rows (or columns, or contracted entries) of the
grouped operand; what lies past it is not computed. So the count reads ``offs``' values:
a record of a real run counts what ran (a raw rule, called with the op's arguments, each
call counted on its own: see :mod:`.opkeys`); a dry run, which has no values, stops there
(the tokens each expert gets depend on the router's values). The forms, as torch's
kernel takes them (``a`` the first operand, ``b`` the second, ``n`` = ``offs[-1]``):

- ``a`` (M, K), ``b`` (G, K, N): rows of ``a`` grouped, 2·n·K·N;
- ``a`` (G, M, K), ``b`` (K, N): columns of ``b`` grouped, 2·M·K·n;
- ``a`` (M, K), ``b`` (K, N), out (G, M, N): the contracted dim grouped, 2·M·N·n
  (the weights' gradient);
- ``a`` (G, M, K), ``b`` (G, K, N), no ``offs``: a batched product, 2·G·M·K·N.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["grouped_mm_flops"]


def grouped_mm_flops(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: Any = None,
) -> int:
    """FLOPs of ``torch._grouped_mm(mat_a, mat_b, offs)`` (``offs`` on a device with values).

    >>> a, b = torch.ones(6, 3), torch.ones(2, 3, 4)
    >>> grouped_mm_flops(a, b, torch.tensor([2, 5], dtype=torch.int32))  # 5 rows of 6
    120
    """
    if offs is None:
        groups, rows, inner = mat_a.shape
        return 2 * groups * rows * inner * mat_b.shape[-1]
    covered = int(offs[-1]) if offs.numel() else 0
    if mat_a.dim() == 2 and mat_b.dim() == 3:
        return 2 * covered * mat_a.shape[1] * mat_b.shape[-1]
    if mat_a.dim() == 3 and mat_b.dim() == 2:
        return 2 * mat_a.shape[1] * mat_a.shape[2] * covered
    return 2 * mat_a.shape[0] * mat_b.shape[1] * covered
