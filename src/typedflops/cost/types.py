"""What a call costs: FLOPs (forward and backward, as numbers and as formulas) and bytes.

Plain data: the conventions behind the numbers are written once, in
``typedflops.cost.engine.rules``; the documentation quotes them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy

from ..text import format_count

__all__ = ["Cost", "OpCost"]


@dataclass(frozen=True)
class OpCost:
    """The cost of one op as it ran.

    ``op`` is its name ("einsum", "rearrange", "matmul", ...), ``pattern`` its einops pattern
    (or None), ``formula``/``backward_formula`` the FLOPs in the dim names of the function
    being asked, ``view`` whether it returned a view (None when that does not apply), and
    ``path`` the decorated functions it ran in, outermost first.
    """

    op: str
    pattern: str | None
    flops: int
    formula: sympy.Expr
    backward_flops: int
    backward_formula: sympy.Expr
    bytes_read: int
    bytes_written: int
    view: bool | None = None
    path: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (formulas as strings)."""
        return {
            "op": self.op,
            "pattern": self.pattern,
            "flops": self.flops,
            "formula": str(self.formula),
            "backward_flops": self.backward_flops,
            "backward_formula": str(self.backward_formula),
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "view": self.view,
            "path": list(self.path),
        }


@dataclass(frozen=True)
class Cost:
    """The cost of a call: totals, formulas in the call's dim names, and a per-op breakdown.

    ``flops`` is the forward count, ``backward_flops`` the count of the backward pass for the
    tensors that require grad, ``dims`` the sizes the formulas are evaluated at (every free
    symbol of a formula is one of them; ``formula`` at ``dims`` is ``flops``), ``ops`` the
    per-op breakdown and ``uncounted`` the names of ops that ran but have no cost rule.
    ``exact`` is True when the formulas were checked against dry runs at other sizes of
    the dims, so they hold at any sizes; when False they hold at ``dims`` only (the body
    branches on sizes, or an op's cost could not be followed), and tables mark them ``~``.
    ``activation_bytes`` (and its formula) are the bytes autograd saves for backward in a dry
    run, each storage once, weights excluded (0 where no dry run was made).
    ``matmul_flops`` (and its formula) are the forward FLOPs of matrix-product kernels
    (matmuls, convolutions, attention's two products): what papers' closed forms count.
    ``recompute_flops`` (and its formula) are the forward FLOPs run again during backward:
    the ops of ``torch.utils.checkpoint`` regions (a training step costs ``flops +
    backward_flops + recompute_flops``).
    """

    flops: int
    backward_flops: int
    formula: sympy.Expr
    backward_formula: sympy.Expr
    dims: Mapping[str, int]
    bytes_read: int
    bytes_written: int
    ops: tuple[OpCost, ...] = ()
    uncounted: tuple[str, ...] = ()
    function: str | None = field(default=None, compare=False)
    exact: bool = True
    activation_bytes: int = 0
    activation_formula: sympy.Expr = field(default_factory=lambda: sympy.Integer(0))
    matmul_flops: int = 0
    matmul_formula: sympy.Expr = field(default_factory=lambda: sympy.Integer(0))
    recompute_flops: int = 0
    recompute_formula: sympy.Expr = field(default_factory=lambda: sympy.Integer(0))

    @property
    def bytes(self) -> int:
        """Bytes read plus bytes written."""
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: forward FLOPs per byte moved (0.0 when nothing moved)."""
        return self.flops / self.bytes if self.bytes else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (formulas as strings)."""
        return {
            "function": self.function,
            "flops": self.flops,
            "backward_flops": self.backward_flops,
            "formula": str(self.formula),
            "backward_formula": str(self.backward_formula),
            "dims": {name: int(size) for name, size in self.dims.items()},
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "intensity": self.intensity,
            "ops": [op.to_dict() for op in self.ops],
            "uncounted": list(self.uncounted),
            "exact": self.exact,
            "activation_bytes": self.activation_bytes,
            "activation_formula": str(self.activation_formula),
            "matmul_flops": self.matmul_flops,
            "matmul_formula": str(self.matmul_formula),
            "recompute_flops": self.recompute_flops,
            "recompute_formula": str(self.recompute_formula),
        }

    def to_json(self) -> str:
        """The cost as a JSON string."""
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        dims = ", ".join(f"{name}={size}" for name, size in self.dims.items())
        head = f"Cost of {self.function}({dims})" if self.function else f"Cost({dims})"
        mark = "" if self.exact else "~ "
        rows = [
            ("forward FLOPs", format_count(self.flops), mark + str(self.formula)),
            (
                "backward FLOPs",
                format_count(self.backward_flops),
                mark + str(self.backward_formula),
            ),
            *(
                [
                    (
                        "recomputed FLOPs",
                        format_count(self.recompute_flops),
                        str(self.recompute_formula),
                    )
                ]
                if self.recompute_flops
                else []
            ),
            ("bytes read", format_count(self.bytes_read), ""),
            ("bytes written", format_count(self.bytes_written), ""),
            ("intensity", f"{self.intensity:.3g} FLOP/B", ""),
        ]
        lines = [head]
        lines += [
            f"  {label:<15} {value:>12}  {formula}".rstrip() for label, value, formula in rows
        ]
        for op in self.ops:
            where = "/".join(op.path)
            pattern = f' "{op.pattern}"' if op.pattern else ""
            view = " (view)" if op.view else ""
            lines.append(
                f"    {where}: {op.op}{pattern}{view}  {format_count(op.flops)}  {op.formula}"
            )
        if self.uncounted:
            lines.append(f"  uncounted ops: {', '.join(self.uncounted)}")
        if not self.exact:
            lines.append("  ~ formulas hold at these sizes only (not checked at others)")
        return "\n".join(lines)
