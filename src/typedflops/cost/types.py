"""What a call costs: FLOPs (forward and backward, as numbers and as formulas) and bytes.

Plain data: the conventions behind the numbers are written once, in
``typedflops.cost.engine.rules``; the documentation quotes them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

import sympy

from ..text import format_count


@overload
def palm_model_flops(matmul_flops: int) -> int: ...
@overload
def palm_model_flops(matmul_flops: sympy.Expr) -> sympy.Expr: ...


def palm_model_flops(matmul_flops: int | sympy.Expr) -> int | sympy.Expr:
    """A training step's model FLOPs (PaLM, Chowdhery et al. 2022, Appendix B) from its
    forward's matrix-product FLOPs (a count or a formula): backward runs two products for
    each forward one, so 3x; recomputation is not credited.

    >>> palm_model_flops(2 * 1024 * 256 * 64) == 6 * 1024 * 256 * 64
    True
    """
    return 3 * matmul_flops


__all__ = [
    "Cost",
    "OpCost",
    "Term",
    "above_one",
    "at_size_one",
    "is_one",
    "palm_model_flops",
    "tidy",
]


def is_one(size: sympy.Expr) -> sympy.Expr:
    """1 where ``size`` is 1, else 0 (sympy's ``KroneckerDelta(1, size)``): in a formula,
    the part that holds at size 1 only (where torch runs other kernels: a sum over one
    element is a multiply). Plain sympy, so a formula read back from text keeps it.

    >>> n, d = sympy.symbols("n d")
    >>> formula = 2 * n * d - n * is_one(d)
    >>> formula, formula.xreplace({n: 4, d: 1}), formula.xreplace({n: 4, d: 3})
    (2*d*n - n*KroneckerDelta(1, d), 4, 24)
    """
    return sympy.KroneckerDelta(1, size)


def at_size_one(expr: sympy.Basic) -> bool:
    """Whether ``expr`` is an :func:`is_one` factor."""
    return isinstance(expr, sympy.KroneckerDelta) and sympy.Integer(1) in expr.args


def tidy(formula: sympy.Expr) -> sympy.Expr:
    """``formula`` as its part at sizes of 2 and up, plus one factored part for each set of
    dims at 1.

    >>> b, i, o = sympy.symbols("b i o")
    >>> tidy(2 * b * i * o - (b * o - b) * is_one(i) - b * is_one(i))
    2*b*i*o - b*o*KroneckerDelta(1, i)
    """
    parts: dict[sympy.Expr, sympy.Expr] = {}
    for monomial in sympy.Add.make_args(sympy.expand(formula)):
        factors = sympy.Mul.make_args(monomial)
        key = sympy.Mul(*(f for f in factors if at_size_one(f)))
        rest = sympy.Mul(*(f for f in factors if not at_size_one(f)))
        parts[key] = parts.get(key, sympy.Integer(0)) + rest
    general = sympy.factor(parts.pop(sympy.Integer(1), sympy.Integer(0)))
    ordered = sorted(parts.items(), key=lambda item: (len(item[0].args), str(item[0])))
    return sympy.Add(general, *(sympy.factor(rest) * key for key, rest in ordered if rest != 0))


def above_one(formula: sympy.Expr) -> sympy.Expr:
    """``formula`` where every dim is 2 or more: its parts at size 1 dropped.

    >>> n, d = sympy.symbols("n d")
    >>> above_one(2 * n * d - n * is_one(d))
    2*d*n
    """
    return sympy.sympify(formula).replace(at_size_one, lambda e: sympy.Integer(0))


@dataclass(frozen=True)
class Term:
    """A count and the formula it is an instance of, in the dim names of a call.

    ``formula`` at the call's sizes is ``count``. ``exact`` says that the formula was
    checked by dry runs at other values of every symbol in it (and that a size the runs
    could not change is a number in it, never a name), so it gives the count at any sizes;
    when False it holds at the call's own sizes only.

    >>> term = Term(96, sympy.sympify("2*m*n*k"))
    >>> term.holds_at({"m": 2, "n": 3, "k": 8}), term.at({"m": 4, "n": 3, "k": 8})
    (True, 192)
    >>> Term.of_count(96)
    Term(count=96, formula=96, exact=False)
    """

    count: int
    formula: sympy.Expr
    exact: bool = True

    @classmethod
    def of_count(cls, count: int, *, exact: bool = False) -> Term:
        """A count with no formula but itself (``exact`` only where nothing could vary)."""
        return cls(count, sympy.Integer(count), exact)

    def at(self, dims: Mapping[str, int]) -> Any:
        """The formula at ``dims`` (name to size); symbols not in ``dims`` stay symbols."""
        return self.formula.xreplace({sympy.Symbol(name): size for name, size in dims.items()})

    def holds_at(self, dims: Mapping[str, int]) -> bool:
        """Whether every symbol of the formula is in ``dims`` and it gives ``count`` there."""
        names = {str(symbol) for symbol in self.formula.free_symbols}
        return names <= dims.keys() and self.at(dims) == self.count

    def __add__(self, other: Term) -> Term:
        """Both counts together, with their formulas' sum (exact where both are).

        >>> Term(6, sympy.sympify("3*n")) + Term(4, sympy.sympify("2*n"))
        Term(count=10, formula=5*n, exact=True)
        """
        return Term(
            self.count + other.count, self.formula + other.formula, self.exact and other.exact
        )

    def scaled(self, factor: int) -> Term:
        """The count and formula ``factor`` times over (bytes per element, say).

        >>> Term(6, sympy.sympify("3*n")).scaled(4)
        Term(count=24, formula=12*n, exact=True)
        """
        return Term(factor * self.count, factor * self.formula, self.exact)

    def checked_at(self, dims: Mapping[str, int]) -> Term:
        """This term where its formula gives its count at ``dims``, else the count alone,
        not exact (a formula is never shown where it is false)."""
        return self if self.holds_at(dims) else Term.of_count(self.count)


ZERO = Term(0, sympy.Integer(0))


@dataclass(frozen=True)
class OpCost:
    """The cost of one op as it ran.

    ``op`` is its name ("einsum", "rearrange", "matmul", ...), ``pattern`` its einops pattern
    (or None), ``forward``/``backward`` its FLOPs as :class:`Term` s in the dim names of the
    function being asked (``flops``/``formula``, ``backward_flops``/``backward_formula``),
    ``view`` whether it returned a view (None when that does not apply), and ``path`` the
    decorated functions it ran in, outermost first.
    """

    op: str
    pattern: str | None
    forward: Term
    backward: Term
    bytes_read: int
    bytes_written: int
    view: bool | None = None
    path: tuple[str, ...] = ()

    @property
    def flops(self) -> int:
        """Forward FLOPs."""
        return self.forward.count

    @property
    def formula(self) -> sympy.Expr:
        """Forward FLOPs as a formula."""
        return self.forward.formula

    @property
    def backward_flops(self) -> int:
        """Backward FLOPs (for the tensors that require grad)."""
        return self.backward.count

    @property
    def backward_formula(self) -> sympy.Expr:
        """Backward FLOPs as a formula."""
        return self.backward.formula

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

    Each count travels with its formula as a :class:`Term`: ``forward`` (``flops``,
    ``formula``), ``backward`` for the tensors that require grad (``backward_flops``,
    ``backward_formula``), ``matmul`` the forward FLOPs of matrix-product kernels (matmuls,
    convolutions, attention's two products: what papers' closed forms count) and of the
    products inside fused kernels (an LSTM layer's gates, ``nn.Bilinear``'s), ``recompute``
    the forward FLOPs run again during backward (the ops of ``torch.utils.checkpoint``
    regions: a training step costs ``flops + backward_flops + recompute_flops``) and
    ``activation`` the bytes autograd saves for backward in a dry run, each storage once,
    weights excluded (0 where no dry run was made); each also under its old names
    (``matmul_flops``, ``matmul_formula``...). ``dims`` are the sizes the formulas are
    evaluated at: every free symbol of a formula is one of them and each formula gives its
    count there. ``fixed`` are the sizes the dry runs could not change (a module's own,
    where it cannot be rebuilt at others): they are numbers in the formulas, which hold for
    those values. ``ops`` is the per-op breakdown and ``uncounted`` the names of ops that
    ran but have no cost rule. ``assumed`` says what a dry run took as given of values it
    did not have, where a kernel skips entries by value (``nll_loss``'s targets equal to
    ``ignore_index``, ``embedding``'s ids equal to ``padding_idx``): every entry counted,
    the count of an input that skips none and an upper bound otherwise (empty for a
    record of a real run, which counts what ran). ``exact`` is True when every formula was
    checked against dry runs at other values of each of its symbols, so they hold at any
    sizes; when False (the body's ops change with a size in a way no formula fitted, or an
    op's cost could not be followed) the formulas not checked hold at ``dims`` only, and
    tables mark them ``~``.
    """

    forward: Term
    backward: Term
    dims: Mapping[str, int]
    bytes_read: int
    bytes_written: int
    ops: tuple[OpCost, ...] = ()
    uncounted: tuple[str, ...] = ()
    function: str | None = field(default=None, compare=False)
    matmul: Term = ZERO
    recompute: Term = ZERO
    activation: Term = ZERO
    fixed: Mapping[str, int] = field(default_factory=dict)
    assumed: tuple[str, ...] = ()

    @property
    def terms(self) -> dict[str, Term]:
        """Every term by name: forward, backward, matmul, recompute, activation."""
        return {
            "forward": self.forward,
            "backward": self.backward,
            "matmul": self.matmul,
            "recompute": self.recompute,
            "activation": self.activation,
        }

    def with_terms(self, terms: Mapping[str, Term], **changes: Any) -> Cost:
        """This cost with its terms replaced by ``terms`` (by the names of :attr:`terms`),
        and any other field given as a keyword."""
        return dataclasses.replace(
            self,
            forward=terms["forward"],
            backward=terms["backward"],
            matmul=terms["matmul"],
            recompute=terms["recompute"],
            activation=terms["activation"],
            **changes,
        )

    def with_notes_of(self, *others: Cost) -> Cost:
        """This cost with the ``uncounted`` ops and ``assumed`` lines of ``others`` added
        after its own (each once, in the order first met): a cost built from others says
        all they said."""
        uncounted = tuple(
            dict.fromkeys((*self.uncounted, *(n for o in others for n in o.uncounted)))
        )
        assumed = tuple(dict.fromkeys((*self.assumed, *(n for o in others for n in o.assumed))))
        return dataclasses.replace(self, uncounted=uncounted, assumed=assumed)

    @property
    def exact(self) -> bool:
        """Whether every formula holds at any sizes (see the class docstring)."""
        return all(term.exact for term in self.terms.values())

    @property
    def flops(self) -> int:
        """Forward FLOPs."""
        return self.forward.count

    @property
    def formula(self) -> sympy.Expr:
        """Forward FLOPs as a formula in the dims."""
        return self.forward.formula

    @property
    def backward_flops(self) -> int:
        """Backward FLOPs, for the tensors that require grad."""
        return self.backward.count

    @property
    def backward_formula(self) -> sympy.Expr:
        """Backward FLOPs as a formula in the dims."""
        return self.backward.formula

    @property
    def matmul_flops(self) -> int:
        """Forward FLOPs of matrix-product kernels."""
        return self.matmul.count

    @property
    def matmul_formula(self) -> sympy.Expr:
        """:attr:`matmul_flops` as a formula in the dims."""
        return self.matmul.formula

    @property
    def recompute_flops(self) -> int:
        """Forward FLOPs run again during backward (checkpointed regions)."""
        return self.recompute.count

    @property
    def recompute_formula(self) -> sympy.Expr:
        """:attr:`recompute_flops` as a formula in the dims."""
        return self.recompute.formula

    @property
    def activation_bytes(self) -> int:
        """Bytes autograd saves for backward (each storage once, weights excluded)."""
        return self.activation.count

    @property
    def activation_formula(self) -> sympy.Expr:
        """:attr:`activation_bytes` as a formula in the dims."""
        return self.activation.formula

    @property
    def bytes(self) -> int:
        """Bytes read plus bytes written."""
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: forward FLOPs per byte moved (0.0 when nothing moved)."""
        return self.flops / self.bytes if self.bytes else 0.0

    def to_dict(
        self, *, ops: bool = True, text: Callable[[sympy.Expr], str] = str
    ) -> dict[str, Any]:
        """A JSON-ready dict (formulas as strings, written by ``text``; without the per-op
        breakdown where ``ops`` is False)."""
        found: dict[str, Any] = {
            "function": self.function,
            "flops": self.flops,
            "backward_flops": self.backward_flops,
            "formula": text(self.formula),
            "backward_formula": text(self.backward_formula),
            "dims": {name: int(size) for name, size in self.dims.items()},
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "intensity": self.intensity,
            "ops": [op.to_dict() for op in self.ops],
            "uncounted": list(self.uncounted),
            "assumed": list(self.assumed),
            "exact": self.exact,
            "inexact": [name for name, term in self.terms.items() if not term.exact],
            "fixed": {name: int(size) for name, size in self.fixed.items()},
            "activation_bytes": self.activation_bytes,
            "activation_formula": text(self.activation_formula),
            "matmul_flops": self.matmul_flops,
            "matmul_formula": text(self.matmul_formula),
            "recompute_flops": self.recompute_flops,
            "recompute_formula": text(self.recompute_formula),
        }
        if not ops:
            del found["ops"]
        return found

    def to_json(self) -> str:
        """The cost as a JSON string."""
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        dims = ", ".join(f"{name}={size}" for name, size in self.dims.items())
        head = f"Cost of {self.function}({dims})" if self.function else f"Cost({dims})"

        def row(label: str, term: Term) -> tuple[str, str, str]:
            mark = "" if term.exact else "~ "
            return (label, format_count(term.count), mark + str(term.formula))

        rows = [
            row("forward FLOPs", self.forward),
            row("backward FLOPs", self.backward),
            *([row("recomputed FLOPs", self.recompute)] if self.recompute.count else []),
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
            mark = "" if op.forward.exact else "~ "
            lines.append(
                f"    {where}: {op.op}{pattern}{view}  {format_count(op.flops)}  {mark}{op.formula}"
            )
        if self.uncounted:
            lines.append(f"  uncounted ops: {', '.join(self.uncounted)}")
        for note in self.assumed:
            lines.append(f"  values not known: {note}")
        if self.fixed:
            held = ", ".join(f"{name}={size}" for name, size in self.fixed.items())
            lines.append(f"  held fixed (numbers in the formulas): {held}")
        if not self.exact:
            lines.append("  ~ formulas hold at these sizes only (not checked at others)")
        return "\n".join(lines)
