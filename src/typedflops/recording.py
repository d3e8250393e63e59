"""Recording costs: which decorated calls and ops ran, nested as they ran.

Recording is off on the hot path. It is on inside ``with record():``, in ``f.estimate(...)``
and when a formula is derived. While it is on, every decorated call opens a :class:`Node`.
A node knows, for each tensor it has seen, the formula term of each axis in the node's own
dim names (``x`` of a ``"batch d_in"`` argument is ``(batch, d_in)``); ops use those terms to
write their FLOP formulas, and when a call returns, its ops are renamed into its caller's
names through the tensors that were passed, and rolled up.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import sympy
import torch

from .annotation import ELLIPSIS, AxisKind, TensorSpec
from .cost import Cost, OpCost
from .text import format_count, text_table

if TYPE_CHECKING:
    from .bench import Measurement

__all__ = [
    "Node",
    "Recorder",
    "current_node",
    "log_measured",
    "paused",
    "record",
    "spec_symbols",
]

_node: ContextVar[Node | None] = ContextVar("typedflops_node", default=None)
_counting: ContextVar[bool] = ContextVar("typedflops_counting", default=False)


def current_node() -> Node | None:
    """The innermost node being recorded into, or None when nothing is recording."""
    return _node.get()


def spec_symbols(spec: TensorSpec, shape: tuple[int, ...]) -> tuple[sympy.Expr, ...]:
    """The formula term of each axis of a tensor of ``shape`` annotated with ``spec``.

    A variadic group is one symbol, its product: the first axis of the group carries the
    symbol and the others carry 1, so products over the group are exact.

    >>> from jaxtyping import Float
    >>> from torch import Tensor
    >>> from typedflops.annotation import tensor_spec
    >>> spec_symbols(tensor_spec(Float[Tensor, "*batch d 3"]), (2, 5, 7, 3))
    (batch, 1, d, 3)
    """
    axes = spec.axes
    if spec.variadic_index is None:
        return tuple(axis.symbol(size) for axis, size in zip(axes, shape, strict=True))
    cut = spec.variadic_index
    after = len(axes) - cut - 1
    group = len(shape) - cut - after
    head = [axis.symbol(size) for axis, size in zip(axes[:cut], shape[:cut], strict=True)]
    variadic = axes[cut]
    middle: list[sympy.Expr] = []
    if group > 0:
        middle = [variadic.symbol(0)] + [sympy.Integer(1)] * (group - 1)
    tail_shape = shape[len(shape) - after :] if after else ()
    tail = [axis.symbol(size) for axis, size in zip(axes[cut + 1 :], tail_shape, strict=True)]
    return (*head, *middle, *tail)


class Node:
    """One recorded call of a decorated function (or the session of a ``record()``)."""

    def __init__(self, function: str, parent: Node | None, *, session: bool = False) -> None:
        self.function = function
        # A session's formulas are its calls' formulas, each in its own names: a session
        # has no dims of its own to check them against or to rename them into.
        self.session = session
        self.parent = parent
        self.path: tuple[str, ...] = (
            (*parent.path, function) if parent and not parent.session else (function,)
        )
        self.dims: dict[str, int] = {}
        self.ops: list[OpCost] = []
        self.uncounted: list[str] = []
        self.children: list[Node] = []
        self.measurement: Measurement | None = None
        # id(tensor) -> (tensor, terms): the tensor is kept so its id is not reused meanwhile.
        self._terms: dict[int, tuple[torch.Tensor, tuple[sympy.Expr, ...]]] = {}

    # -- what ops use -------------------------------------------------------------------

    def shape_symbols(self, tensor: torch.Tensor) -> tuple[sympy.Expr, ...]:
        """The formula term of each axis of ``tensor``: known dims, else its sizes as numbers."""
        entry = self._terms.get(id(tensor))
        if entry is not None and entry[0] is tensor and len(entry[1]) == tensor.dim():
            return entry[1]
        return tuple(sympy.Integer(size) for size in tensor.shape)

    def set_shape_symbols(self, tensor: torch.Tensor, terms: Iterable[sympy.Expr]) -> None:
        """Record the formula term of each axis of ``tensor`` (e.g. an op's output)."""
        self._terms[id(tensor)] = (tensor, tuple(terms))

    def add_op(self, op: OpCost) -> None:
        """Add the cost of one op, with formulas in this node's dim names.

        A formula that does not evaluate to the counted FLOPs at this call's sizes is
        replaced by the count itself, so a formula is never wrong, only less symbolic.
        """
        formula = self._checked(op.formula, op.flops)
        backward = self._checked(op.backward_formula, op.backward_flops)
        self.ops.append(
            OpCost(
                op=op.op,
                pattern=op.pattern,
                flops=op.flops,
                formula=formula,
                backward_flops=op.backward_flops,
                backward_formula=backward,
                bytes_read=op.bytes_read,
                bytes_written=op.bytes_written,
                view=op.view,
                path=op.path or self.path,
            )
        )

    def add_uncounted(self, name: str) -> None:
        """Note an op that ran and does arithmetic but has no cost rule."""
        self.uncounted.append(name)

    def _checked(self, formula: sympy.Expr, count: int) -> sympy.Expr:
        formula = sympy.sympify(formula)
        if formula.is_Integer or self.session:
            return formula
        sizes = {sympy.Symbol(name): size for name, size in self.dims.items()}
        if not formula.free_symbols <= set(sizes):
            return sympy.Integer(count)
        value = formula.xreplace(sizes)
        return formula if value == count else sympy.Integer(count)

    # -- what the decorator uses --------------------------------------------------------

    def bind_dims(self, sizes: Mapping[str, int | tuple[int, ...]]) -> None:
        """Take the call's bound dims (a variadic dim's sizes become their product)."""
        for name, size in sizes.items():
            self.dims[name] = size if isinstance(size, int) else math.prod(size)

    def enter_tensor(self, tensor: torch.Tensor, spec: TensorSpec) -> None:
        """Give an argument of this call the terms of its annotation."""
        self.set_shape_symbols(tensor, spec_symbols(spec, tuple(tensor.shape)))
        if spec.variadic_index is not None and ELLIPSIS not in self.dims:
            axis = spec.axes[spec.variadic_index]
            if axis.kind is AxisKind.ANONYMOUS_VARIADIC:
                after = len(spec.axes) - spec.variadic_index - 1
                group = tensor.shape[spec.variadic_index : tensor.dim() - after]
                self.dims[ELLIPSIS] = math.prod(group)

    def renaming(
        self, caller: Node, passed: Iterable[tuple[torch.Tensor, TensorSpec]]
    ) -> dict[sympy.Symbol, sympy.Expr]:
        """How this call's dim symbols read in ``caller``'s names, through the tensors passed.

        A dim that no passed tensor determines becomes its size, as a number.
        """
        mapping: dict[sympy.Symbol, sympy.Expr] = {}
        if caller.session:
            return mapping
        for tensor, spec in passed:
            own = spec_symbols(spec, tuple(tensor.shape))
            theirs = caller.shape_symbols(tensor)
            for index, term in enumerate(own):
                if isinstance(term, sympy.Symbol) and term not in mapping:
                    group = self._group_terms(spec, index, theirs)
                    if group is not None:
                        mapping[term] = group
        for name, size in self.dims.items():
            mapping.setdefault(sympy.Symbol(name), sympy.Integer(size))
        return mapping

    @staticmethod
    def _group_terms(
        spec: TensorSpec, index: int, theirs: tuple[sympy.Expr, ...]
    ) -> sympy.Expr | None:
        cut = spec.variadic_index
        if cut is None or index < cut:
            return theirs[index] if index < len(theirs) else None
        after = len(spec.axes) - cut - 1
        if index == cut and len(theirs) - cut - after >= 1:
            return sympy.Mul(*theirs[cut : len(theirs) - after])
        return theirs[index] if index < len(theirs) else None

    def absorb(self, child: Node, mapping: Mapping[sympy.Symbol, sympy.Expr]) -> None:
        """Roll a finished child call up into this node, renaming its formulas."""
        self.children.append(child)
        for op in child.ops:
            self.add_op(
                OpCost(
                    op=op.op,
                    pattern=op.pattern,
                    flops=op.flops,
                    formula=sympy.sympify(op.formula).xreplace(mapping),
                    backward_flops=op.backward_flops,
                    backward_formula=sympy.sympify(op.backward_formula).xreplace(mapping),
                    bytes_read=op.bytes_read,
                    bytes_written=op.bytes_written,
                    view=op.view,
                    path=op.path,
                )
            )
        self.uncounted.extend(child.uncounted)

    def cost(self) -> Cost:
        """The cost of this call so far, in its own dim names."""
        return Cost.from_ops(self.ops, self.dims, self.uncounted, function=self.function)


@contextlib.contextmanager
def recording(node: Node) -> Iterator[Node]:
    """Make ``node`` the one that ops and nested calls record into, inside the block."""
    from .counting import counting_mode  # the torch-op counter needs the node machinery

    token = _node.set(node)
    try:
        # One counting mode per thread: a dry run inside a record() block must not stack a
        # second mode, or every torch call would be counted twice.
        if node.parent is None and not _counting.get():
            counting = _counting.set(True)
            try:
                with counting_mode():
                    yield node
            finally:
                _counting.reset(counting)
        else:
            yield node
    finally:
        _node.reset(token)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Record nothing inside the block (timed runs of ``benchmark`` are not new calls)."""
    token = _node.set(None)
    try:
        yield
    finally:
        _node.reset(token)


def log_measured(parent: Node, name: str, cost: Cost, measurement: Measurement) -> None:
    """Add a benchmarked call to ``parent`` as one call, with its cost and measurement."""
    node = Node(name, parent)
    node.dims.update(cost.dims)
    for op in cost.ops:
        node.add_op(op)
    node.uncounted.extend(cost.uncounted)
    node.measurement = measurement
    parent.absorb(node, {})


class Recorder:
    """What a ``with record() as rec:`` block saw: its top-level calls, nested as they ran."""

    def __init__(self) -> None:
        self.session = Node("<record>", None, session=True)

    @property
    def calls(self) -> list[Node]:
        """The top-level decorated calls, in order (each with its ``children``)."""
        return self.session.children

    @property
    def total(self) -> Cost:
        """The cost of everything recorded (nested calls rolled up into their callers)."""
        return self.session.cost()

    def rows(self) -> list[dict[str, Any]]:
        """One row per recorded call, depth-first: function, depth, dims, cost, measurement."""
        found: list[dict[str, Any]] = []

        def visit(node: Node, depth: int) -> None:
            cost = node.cost()
            row: dict[str, Any] = {"function": node.function, "depth": depth, **cost.to_dict()}
            row.pop("ops")
            if node.measurement is not None:
                row["measurement"] = node.measurement.to_dict()
            found.append(row)
            for child in node.children:
                visit(child, depth + 1)

        for call in self.calls:
            visit(call, 0)
        return found

    def table(self) -> str:
        """A text table: function, dims, formula, FLOPs, bytes, intensity (and time, MFU)."""
        header = ["function", "dims", "formula", "FLOPs", "bytes", "FLOP/B"]
        body: list[list[str]] = []
        rows = self.rows()
        timed = any("measurement" in row for row in rows)
        if timed:
            header += ["time", "FLOP/s", "MFU"]
        for row in rows:
            cells = [
                "  " * row["depth"] + row["function"],
                ", ".join(f"{k}={v}" for k, v in row["dims"].items()),
                row["formula"],
                format_count(row["flops"]),
                format_count(row["bytes_read"] + row["bytes_written"]),
                f"{row['intensity']:.3g}",
            ]
            if timed:
                measured = row.get("measurement") or {}
                cells += [
                    f"{measured['median'] * 1e3:.3g} ms" if measured else "",
                    format_count(measured["flop_per_sec"]) if measured else "",
                    f"{measured['mfu']:.1%}" if measured.get("mfu") is not None else "",
                ]
            body.append(cells)
        total = self.total
        body.append(
            [
                "total",
                "",
                str(total.formula),
                format_count(total.flops),
                format_count(total.bytes),
                f"{total.intensity:.3g}",
            ]
            + [""] * (len(header) - 6)
        )
        return text_table(header, body)

    def to_json(self) -> str:
        """Everything recorded as JSON: the calls (depth-first) and the total."""
        return json.dumps({"calls": self.rows(), "total": self.total.to_dict()}, indent=2)


@contextlib.contextmanager
def record() -> Iterator[Recorder]:
    """Record every decorated call and wrapped op inside the block.

    >>> import torch
    >>> from typedflops import einsum
    >>> with record() as rec:
    ...     _ = einsum(torch.ones(4, 3), torch.ones(3, 2), "i j, j k -> i k")
    >>> rec.total.flops
    48
    """
    recorder = Recorder()
    with recording(recorder.session):
        yield recorder
