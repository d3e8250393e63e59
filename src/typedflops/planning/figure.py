"""One per-rank figure: a number, its formula, where it comes from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy

__all__ = ["Figure"]


@dataclass(frozen=True)
class Figure:
    """One per-rank figure: its value, its formula (None where there is none) and where
    it comes from (``"torch"``: the sharded dry run; ``"closed form"``; or both)."""

    value: float
    formula: sympy.Expr | None
    source: str
    exact: bool = True

    def to_dict(self) -> dict[str, Any]:
        """``{"value", "formula", "source", "exact"}``, JSON-ready."""
        value: float | int = int(self.value) if float(self.value).is_integer() else self.value
        return {
            "value": value,
            "formula": None if self.formula is None else str(self.formula),
            "source": self.source,
            "exact": self.exact,
        }
