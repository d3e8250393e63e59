"""Assertions for tests of ``@typed_flops`` code: FLOP formulas, contract errors, an oracle.

- :func:`assert_flops` — a function's FLOP formula equals the expected one symbolically,
  and (given dims) its count at those sizes equals the expected formula's value;
- :func:`assert_contract_error` — a call raises a :class:`ContractError` (of a given
  subclass, at a given dim) and returns it for further checks;
- :func:`assert_matches_flop_counter` — typedflops' matmul-family count of a real call
  equals ``torch.utils.flop_counter.FlopCounterMode``'s, forward and (with ``loss=``)
  backward.

Each raises ``AssertionError`` with both sides written out, so pytest shows why.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.utils.flop_counter import FlopCounterMode

from .config import enabled
from .contract.bound import TypedMethod
from .cost.engine.recorder import torch_counts
from .cost.engine.report import record
from .cost.engine.rules import FLOP_COUNTER_CORRECTIONS
from .cost.types import Cost, above_one, at_size_one
from .decorator import TypedFunction
from .errors import ContractError, SpecError
from .syntax.expr import parse_expression

__all__ = [
    "FlopComparison",
    "assert_contract_error",
    "assert_flops",
    "assert_matches_flop_counter",
]

Size = int | tuple[int, ...]


def _typed_target(fn: Any) -> tuple[TypedFunction[..., Any], tuple[Any, ...]] | None:
    """The ``TypedFunction`` behind ``fn`` and the object a method is bound to, if any.

    Looks through bound methods and ``functools.wraps`` wrappers (``@torch.no_grad()``).
    """
    bound: tuple[Any, ...] = ()
    for _ in range(32):  # a __wrapped__ chain is short; a cycle must not hang a test
        if isinstance(fn, TypedFunction):
            return fn, bound
        if isinstance(fn, (types.MethodType, TypedMethod)):
            bound = (fn.__self__,)
            fn = fn.__func__
            continue
        if isinstance(fn, torch.nn.Module):
            bound, fn = (fn,), type(fn).forward
            continue
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return None
    return None


def _estimate(
    target: TypedFunction[..., Any],
    bound: tuple[Any, ...],
    dims: Mapping[str, Size],
    grad: Sequence[str] = (),
) -> Cost:
    """``target.estimate(*bound, **dims)`` (a bound module's parameters become meta too)."""
    estimate: Callable[..., Cost] = target.estimate  # dims are keywords, like dtype=
    return estimate(*bound, grad=tuple(grad), **dims)


def _name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn)))


def _expected_expression(expected: str | int | sympy.Expr) -> sympy.Expr:
    if isinstance(expected, str):
        return parse_expression(expected, origin="expected formula").sympy
    return sympy.sympify(expected)


def _value_at(formula: sympy.Expr, dims: Mapping[str, Size]) -> sympy.Expr:
    sizes = {
        sympy.Symbol(name): size if isinstance(size, int) else sympy.Mul(*size)
        for name, size in dims.items()
    }
    return sympy.sympify(formula).xreplace(sizes)


def _same(actual: sympy.Expr, expected: sympy.Expr) -> bool:
    if not any(at_size_one(e) for e in sympy.preorder_traversal(expected)):
        actual = above_one(actual)  # (a formula from a book holds at sizes of 2 and up)
    difference = sympy.expand(actual - expected)
    return bool(difference == 0 or sympy.simplify(difference) == 0)


def _dims_text(dims: Mapping[str, Size]) -> str:
    return ", ".join(f"{name}={size}" for name, size in dims.items())


def assert_flops(
    fn: Callable[..., Any],
    expected: str | int | sympy.Expr,
    /,
    *,
    backward: str | int | sympy.Expr | None = None,
    grad: Sequence[str] = (),
    **dims: Size,
) -> sympy.Expr:
    """Assert that ``fn``'s forward FLOP formula is ``expected`` (and its value at ``dims``).

    ``expected`` is a formula in ``fn``'s dim names, as a string (parsed safely, never
    evaluated) or a sympy expression. Without ``dims`` the formula ``fn.formula`` must
    equal it symbolically. With ``dims``, ``fn.estimate(**dims)`` is run and both its
    formula and its FLOP count must agree with ``expected`` at those sizes. Where torch
    runs other kernels at a size of 1 (a sum over one element is a multiply), the formula
    has parts ``KroneckerDelta(1, d)``; an ``expected`` without them is compared with the formula at
    sizes of 2 and up, and the count at ``dims`` still with the count that ran.
    ``backward=`` checks the backward formula the same way, with ``grad`` naming the
    parameters that require grad (dims are then required). ``fn`` may be a
    ``@typed_flops`` function, a bound method of one, or a wrapper around one.
    Returns the actual forward formula.

    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> from typedflops import typed_flops
    >>> @typed_flops(flops="2*batch*d_in*d_out")
    ... def linear(x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
    ...            ) -> Float[Tensor, "batch d_out"]:
    ...     return x @ w
    >>> assert_flops(linear, "2*batch*d_out*d_in", batch=8, d_in=4, d_out=3)
    2*batch*d_in*d_out
    >>> assert_flops(linear, "batch*d_in*d_out")
    Traceback (most recent call last):
      ...
    AssertionError: linear: forward FLOPs do not match
      expected: batch*d_in*d_out
      actual:   2*batch*d_in*d_out
    """
    found = _typed_target(fn)
    if found is None:
        raise AssertionError(
            f"{_name(fn)} is not a @typed_flops function (is the import hook installed?)"
        )
    target, bound = found
    want = _expected_expression(expected)
    want_backward = None if backward is None else _expected_expression(backward)
    if not dims:
        if want_backward is not None:
            raise TypeError("assert_flops(): backward= needs the dims to estimate at")
        actual = target.formula
        if not _same(actual, want):
            raise AssertionError(
                f"{target.name}: forward FLOPs do not match\n"
                f"  expected: {want}\n  actual:   {actual}"
            )
        return actual
    cost = _estimate(target, bound, dims, grad)
    sizes = {**cost.dims, **dims}  # a module's own sizes (d_in of a Linear) come in too
    problems = _compare(want, cost.formula, cost.flops, sizes, "forward")
    if want_backward is not None:
        problems += _compare(
            want_backward, cost.backward_formula, cost.backward_flops, sizes, "backward"
        )
    if problems:
        raise AssertionError(
            f"{target.name}: FLOPs do not match at {_dims_text(dims)}\n" + "\n".join(problems)
        )
    return cost.formula


def _compare(
    want: sympy.Expr, formula: sympy.Expr, count: int, dims: Mapping[str, Size], what: str
) -> list[str]:
    lines: list[str] = []
    value = _value_at(want, dims)
    if value.free_symbols:
        names = ", ".join(sorted(str(s) for s in value.free_symbols))
        lines.append(f"  expected {what} formula {want} names {names}, which no dim gives")
    elif value != count:
        lines.append(f"  {what} at these sizes: expected {value}, actual {count}")
    if not _same(formula, want):
        lines.append(f"  {what} formula: expected {want}, actual {formula}")
    return lines


def assert_contract_error(
    fn: Callable[..., Any],
    /,
    *args: Any,
    dim: str | None = None,
    error: type[ContractError] = ContractError,
    **kwargs: Any,
) -> ContractError:
    """Assert that ``fn(*args, **kwargs)`` raises ``error`` (a :class:`ContractError`).

    With ``dim``, the error must name that dim (``exc.dim``). Returns the error, whose
    attributes (``function``, ``argument``, ``expected``, ``actual``, ``bindings``) a test
    can check further. Any other exception, or none, fails the assertion. (To pass ``fn``
    a keyword argument called ``dim`` or ``error``, use ``functools.partial``.)

    >>> import torch
    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> from typedflops import typed_flops
    >>> from typedflops.errors import ShapeError
    >>> @typed_flops
    ... def add(x: Float[Tensor, "n"], y: Float[Tensor, "n"]) -> Float[Tensor, "n"]:
    ...     return x + y
    >>> err = assert_contract_error(add, torch.ones(3), torch.ones(1), dim="n", error=ShapeError)
    >>> err.bindings
    {'n': 3}
    """
    name = _name(fn)
    try:
        fn(*args, **kwargs)
    except ContractError as exc:
        if not isinstance(exc, error):
            raise AssertionError(
                f"{name}() raised {type(exc).__name__}, not {error.__name__}:\n{exc}"
            ) from exc
        if dim is not None and exc.dim != dim:
            raise AssertionError(
                f"{name}() raised {type(exc).__name__} at dim {exc.dim!r}, not {dim!r}:\n{exc}"
            ) from exc
        return exc
    except Exception as exc:
        raise AssertionError(
            f"{name}() raised {type(exc).__name__}, not {error.__name__}: {exc}{_why_unchecked(fn)}"
        ) from exc
    raise AssertionError(f"{name}() did not raise {error.__name__}{_why_unchecked(fn)}")


def _why_unchecked(fn: Any) -> str:
    if _typed_target(fn) is None:
        return f" ({_name(fn)} is not a @typed_flops function; is the import hook installed?)"
    if not enabled():
        return " (contract checks are off: TYPEDFLOPS_DISABLE=1 or typedflops.disabled())"
    return ""


@dataclass(frozen=True)
class FlopComparison:
    """FLOPs of one call on the kernels ``FlopCounterMode`` counts, as both counted them.

    ``forward``/``backward`` are typedflops' counts of the kernels FlopCounterMode has a
    formula for (matmuls, convolutions, fused attention; backward predicted per forward op
    from which tensors required grad), ``torch_forward``/``torch_backward``
    FlopCounterMode's (backward measured by differentiating ``loss``); the backward pair is
    None without ``loss``. ``cost`` is typedflops' full cost of the call.
    """

    forward: int
    torch_forward: int
    backward: int | None
    torch_backward: int | None
    cost: Cost


def _leaves(output: torch.Tensor) -> list[torch.Tensor]:
    """The leaf tensors requiring grad that ``output`` depends on (from its autograd graph)."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    pending = [output.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)  # an AccumulateGrad node
        if isinstance(variable, torch.Tensor):
            found.append(variable)
        pending.extend(child for child, _ in node.next_functions)
    return found


def assert_matches_flop_counter(
    fn: Callable[..., Any],
    /,
    *args: Any,
    loss: Callable[[Any], torch.Tensor] | None = None,
    **kwargs: Any,
) -> FlopComparison:
    """Run ``fn(*args, **kwargs)`` once and assert typedflops counts what torch counts.

    The call runs under both ``typedflops.record()`` and ``FlopCounterMode``; typedflops'
    FLOPs on the kernels FlopCounterMode has formulas for must equal its total (which
    counts only matmuls, convolutions and attention). With ``loss`` (e.g.
    ``lambda out: out.sum()``) the gradient of ``loss(output)`` is then taken under a
    second FlopCounterMode (with ``torch.autograd.grad``, so no ``.grad`` is touched) and
    must equal typedflops' predicted backward FLOPs. Where FlopCounterMode's formula counts
    other work than the kernel does (a convolution's backward: a grouped one's weight
    gradient, a bias's gradient; the README lists these), it is given typedflops'
    formula. Matmuls inside ``loss`` itself are counted by torch too: keep it a sum. An
    ``einsum`` that multiplies without summing costs N in typedflops and 0 in
    FlopCounterMode: do not compare those.

    >>> import torch
    >>> from typedflops import typed_flops
    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> @typed_flops
    ... def linear(x: Float[Tensor, "batch d_in"], w: Float[Tensor, "d_in d_out"]
    ...            ) -> Float[Tensor, "batch d_out"]:
    ...     return x @ w
    >>> w = torch.ones(4, 3, requires_grad=True)
    >>> compared = assert_matches_flop_counter(linear, torch.ones(8, 4), w, loss=torch.sum)
    >>> compared.forward, compared.torch_forward, compared.backward, compared.torch_backward
    (192, 192, 192, 192)
    """
    name = _name(fn)
    corrected = FLOP_COUNTER_CORRECTIONS
    with (
        FlopCounterMode(display=False, custom_mapping=corrected) as forward_counter,
        record() as recorder,
    ):
        output = fn(*args, **kwargs)
    cost = recorder.total
    forward, predicted_backward = torch_counts(recorder.session.root)
    torch_forward = int(forward_counter.get_total_flops())
    backward = torch_backward = None
    if loss is not None:
        value = loss(output)
        if not isinstance(value, torch.Tensor) or not value.requires_grad:
            raise SpecError.at(
                f"assert_matches_flop_counter({name})",
                "loss(output) does not require grad",
                hint="make a parameter or input require grad, or leave out loss=",
            )
        with FlopCounterMode(display=False, custom_mapping=corrected) as backward_counter:
            torch.autograd.grad(value, _leaves(value), allow_unused=True)
        backward = predicted_backward
        torch_backward = int(backward_counter.get_total_flops())
    if forward != torch_forward or backward != torch_backward:
        lines = [f"{name}: typedflops and FlopCounterMode count different FLOPs"]
        lines.append(f"  forward:  typedflops {forward}, FlopCounterMode {torch_forward}")
        if loss is not None:
            lines.append(f"  backward: typedflops {backward}, FlopCounterMode {torch_backward}")
        ops = ", ".join(f"{op.op} {op.flops}" for op in cost.ops if op.flops) or "none"
        lines.append(f"  typedflops counted: {ops}")
        if cost.uncounted:
            lines.append(f"  typedflops did not count: {', '.join(sorted(set(cost.uncounted)))}")
        raise AssertionError("\n".join(lines))
    return FlopComparison(forward, torch_forward, backward, torch_backward, cost)
