"""What a call costs: FLOPs (forward and backward, as numbers and as formulas) and bytes.

Conventions (the same as ``torch.utils.flop_counter.FlopCounterMode`` and CS336 lecture 2):

- one FLOP per scalar multiply, add, compare or divide; accumulators start at zero;
- a contraction over an iteration space of N points costs 2·N (a matmul 2·m·n·k);
- an elementwise product with nothing summed costs N;
- a reduction costs one op per input element (``mean`` adds one divide per output element);
- ``rearrange``, ``repeat`` and views cost 0 FLOPs;
- backward is derived per op: a contraction adds 2·N for each operand that requires grad;
- bytes are the traffic of each op as it ran (its inputs read once, its output written once)
  at the tensors' dtypes; a view moves 0 bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy

from .text import format_count

__all__ = ["Cost", "OpCost"]

ZERO = sympy.Integer(0)


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
    tensors that require grad, ``dims`` the sizes the formulas were evaluated at, ``ops`` the
    per-op breakdown and ``uncounted`` the names of ops that ran but have no cost rule.
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

    @classmethod
    def from_ops(
        cls,
        ops: Iterable[OpCost],
        dims: Mapping[str, int],
        uncounted: Iterable[str] = (),
        function: str | None = None,
    ) -> Cost:
        """Sum a list of op costs into one :class:`Cost`."""
        ops = tuple(ops)
        formula = sympy.expand(sympy.Add(*(op.formula for op in ops)))
        backward = sympy.expand(sympy.Add(*(op.backward_formula for op in ops)))
        return cls(
            flops=sum(op.flops for op in ops),
            backward_flops=sum(op.backward_flops for op in ops),
            formula=sympy.factor(formula) if formula != ZERO else ZERO,
            backward_formula=sympy.factor(backward) if backward != ZERO else ZERO,
            dims=dict(dims),
            bytes_read=sum(op.bytes_read for op in ops),
            bytes_written=sum(op.bytes_written for op in ops),
            ops=ops,
            uncounted=tuple(dict.fromkeys(uncounted)),
            function=function,
        )

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
        }

    def to_json(self) -> str:
        """The cost as a JSON string."""
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        dims = ", ".join(f"{name}={size}" for name, size in self.dims.items())
        head = f"Cost of {self.function}({dims})" if self.function else f"Cost({dims})"
        rows = [
            ("forward FLOPs", format_count(self.flops), str(self.formula)),
            ("backward FLOPs", format_count(self.backward_flops), str(self.backward_formula)),
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
        return "\n".join(lines)
