"""Counting the torch calls a decorated function makes while recording.

:func:`counting_mode` is a ``torch.overrides.TorchFunctionMode``: it sees ``x @ w``,
``torch.matmul``, ``F.linear`` (so ``nn.Linear``), ``torch.einsum``, ... with the original
tensor objects, so each operand keeps the formula terms of its dims (at the dispatch level
they would be anonymous). Inside a handler the mode is off, so a composite call such as
``F.linear`` is counted once, not again for the ``addmm`` it runs; the wrapped einops ops
pause the counter with :func:`paused` for the same reason.

Rules (one FLOP per scalar multiply, add, compare or divide):

- matmul family (``matmul``/``@``, ``mm``, ``bmm``, ``mv``, ``dot``, ``addmm``, ``baddbmm``,
  ``addmv``, ``linear``): 2·m·n·k per matrix product, batch included; the bias of
  ``addmm``/``linear`` is ignored, as ``FlopCounterMode`` does. Backward: 2·m·n·k for each
  matrix operand that requires grad (the grad-input and grad-weight matmuls
  ``FlopCounterMode`` counts; the bias gradient, a sum, is ignored likewise).
- ``torch.einsum``: the rules of :mod:`typedflops.op_costs` (3+ operands along the
  opt_einsum "optimal"/"greedy" order, torch's own choice for up to 4 operands).
- convolutions (``conv1d``/``2d``/``3d``): ``FlopCounterMode``'s 2·(output elements)·
  (C_in/groups)·(kernel points); backward the same for the input and for the weight.
- ``scaled_dot_product_attention``: its two matrix products, 2·b·h·s_q·s_k·(d_q + d_v), as
  ``FlopCounterMode`` counts the fused kernels (and, on CPU, the MATH kernel's bmm's).
  Backward: dV for v, and dP plus dQ/dK for q/k, 2·b·h·s_q·s_k·d each (twice the forward
  when q, k and v all need grad).
- elementwise arithmetic (add, mul, div, exp, tanh, relu, gelu, where, comparisons, ...):
  one op per output element (a transcendental counts 1); backward one op per output element
  for each tensor input that requires grad. ``FlopCounterMode`` counts these 0: typedflops
  counts what it misses.
- reductions (sum, amax, prod, any, argmax, cumsum, ...): one op per input element; ``mean``
  adds a divide per output element. Backward as for ``reduce`` in :mod:`typedflops.op_costs`.
- softmax / log_softmax: 5 ops per element (max, subtract, exp, sum, divide); backward 4.
- views, copies, creation, metadata, conversion and indexing cost 0, silently.
- anything else is listed in ``Cost.uncounted`` (never a silent 0).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import sympy
import torch
from torch.overrides import TorchFunctionMode

from .cost import OpCost
from .op_costs import einsum_cost, tensor_bytes
from .patterns import Reason, einsum_layout, einsum_plan
from .recording import Node, current_node
from .terms import broadcast_terms, reshaped_terms

__all__ = ["MATMUL_OPS", "counting_mode", "paused"]

_paused: ContextVar[bool] = ContextVar("typedflops_counting_paused", default=False)

Rule = Callable[[Node, str, tuple[Any, ...], dict[str, Any], Any], None]

ZERO = sympy.Integer(0)


def _names(text: str) -> frozenset[str]:
    """A set of op names written as words (easier to read and extend than a list literal)."""
    return frozenset(text.split())


MATMUL_OPS = frozenset(
    {"matmul", "mm", "bmm", "mv", "dot", "vdot", "addmm", "baddbmm", "addmv", "linear"}
)

_ELEMENTWISE = _names("""
add sub subtract rsub mul multiply div divide true_divide truediv floordiv floor_divide
remainder mod fmod neg negative abs absolute sign sgn relu relu6 gelu silu mish elu selu celu
leaky_relu hardtanh hardswish hardsigmoid softplus softsign logsigmoid threshold exp exp2 expm1
log log2 log10 log1p logit tanh sigmoid sin cos tan sinh cosh asin acos atan atan2 arctan2 pow
float_power sqrt rsqrt square reciprocal clamp clip clamp_min clamp_max maximum minimum fmax
fmin where eq ne lt le gt ge greater greater_equal less less_equal not_equal lerp addcmul
addcdiv floor ceil round trunc frac erf erfc erfinv logical_and logical_or logical_not
logical_xor bitwise_and bitwise_or bitwise_xor bitwise_not and or xor invert lshift rshift
dropout hypot nan_to_num masked_fill xlogy copysign heaviside isnan isinf isfinite outer ger
""")

# Per input element forward; backward per input element when the input requires grad.
_REDUCTIONS: dict[str, tuple[int, int]] = {
    "sum": (1, 0),
    "nansum": (1, 0),
    "mean": (1, 1),
    "nanmean": (1, 1),
    "amax": (1, 1),
    "amin": (1, 1),
    "max": (1, 1),
    "min": (1, 1),
    "prod": (1, 2),
    "any": (1, 0),
    "all": (1, 0),
    "argmax": (1, 0),
    "argmin": (1, 0),
    "count_nonzero": (1, 0),
    "cumsum": (1, 1),
    "cumprod": (1, 2),
    "softmax": (5, 4),
    "log_softmax": (5, 4),
}

_FREE = _names("""
get set repr format str len bool iter contains index int float hash reduce_ex deepcopy
setstate array dlpack numpy tolist item data_ptr storage untyped_storage element_size
nelement numel dim ndimension size stride storage_offset is_contiguous is_floating_point
is_complex get_device type to cpu cuda double half bfloat16 long byte char short type_as
view view_as reshape reshape_as transpose swapaxes swapdims permute t contiguous clone detach
unsqueeze squeeze flatten unflatten expand expand_as broadcast_to broadcast_tensors narrow
select index_select gather take take_along_dim getitem setitem split chunk unbind tensor_split
cat concat concatenate stack hstack vstack movedim moveaxis diagonal diag_embed tril triu flip
roll rot90 pad one_hot embedding zeros ones empty full rand randn randint randperm arange
linspace logspace eye zeros_like ones_like empty_like full_like rand_like randn_like
randint_like tensor as_tensor as_strided from_numpy new_zeros new_ones new_empty new_full
new_tensor fill zero copy share_memory pin_memory is_pinned record_stream is_view requires_grad
backward register_hook retain_grad unfold repeat repeat_interleave tile scatter nonzero
masked_select is_same_size is_set_to is_nonzero is_shared is_signed is_inference
has_names align_to refine_names rename names device
""")

_ARITHMETIC_DUNDERS = _names("add sub mul truediv floordiv mod pow matmul and or xor lshift rshift")


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Do not count torch calls inside the block (a wrapped op records its own cost)."""
    token = _paused.set(True)
    try:
        yield
    finally:
        _paused.reset(token)


def counting_mode() -> contextlib.AbstractContextManager[object]:
    """A context in which torch calls are counted into :func:`current_node` while it is set.

    >>> import torch
    >>> from typedflops.recording import record
    >>> with record() as rec:
    ...     _ = torch.ones(8, 16) @ torch.ones(16, 4)
    >>> rec.total.flops  # 2 * 8 * 16 * 4
    1024
    """
    return _CountingMode()


class _CountingMode(TorchFunctionMode):
    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if _paused.get():
            return result
        node = current_node()
        if node is None:
            return result
        rule, name = _classify(func)
        if rule is not None:
            try:
                rule(node, name, args, kwargs, result)
            except Reason:
                node.add_uncounted(name)
        return result


_classified: dict[Any, tuple[Rule | None, str]] = {}


def _classify(func: Any) -> tuple[Rule | None, str]:
    try:
        return _classified[func]
    except (KeyError, TypeError):
        pass
    found = _find_rule(func)
    with contextlib.suppress(TypeError):  # an unhashable callable: classify it every time
        _classified[func] = found
    return found


def _find_rule(func: Any) -> tuple[Rule | None, str]:
    raw = str(getattr(func, "__name__", ""))
    name = raw
    if raw.startswith("__") and raw.endswith("__"):
        name = raw[2:-2]
        if name[:1] in "ri" and name[1:] in _ARITHMETIC_DUNDERS:
            name = name[1:]
    elif raw.endswith("_") and not raw.startswith("_"):
        name = raw[:-1]  # in-place variant: add_ counts as add
    if raw in ("__get__", "__set__"):
        # A property such as `x.T` or `x.shape`: named after the property itself.
        return _views, str(getattr(getattr(func, "__self__", None), "__name__", name))
    if name in _FREE:
        return _views, name
    if name in MATMUL_OPS:
        return _matmul, name
    if name == "einsum":
        return _einsum, name
    if name in ("conv1d", "conv2d", "conv3d"):
        return _conv, name
    if name == "scaled_dot_product_attention":
        return _attention, name
    if name in _ELEMENTWISE:
        return _elementwise, name
    if name in _REDUCTIONS:
        return _reduction, name
    try:
        qualified = torch.overrides.resolve_name(func) or raw
    except Exception:
        qualified = raw
    label = str(qualified or repr(func))
    return _uncounted, label


def _uncounted(
    node: Node, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
) -> None:
    node.add_uncounted(name)


def _tensors(args: Sequence[Any], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    found = [a for a in args if isinstance(a, torch.Tensor)]
    found += [a for a in kwargs.values() if isinstance(a, torch.Tensor)]
    return found


def _first_tensor(result: Any) -> torch.Tensor | None:
    if isinstance(result, torch.Tensor):
        return result
    if isinstance(result, (tuple, list)) and result and isinstance(result[0], torch.Tensor):
        return result[0]
    return None


def _broadcast_terms(
    node: Node, out: torch.Tensor, sources: Sequence[torch.Tensor]
) -> list[sympy.Expr]:
    """Output terms under broadcasting: each axis from the first input of the same size."""
    return broadcast_terms(out.shape, [(s.shape, node.shape_symbols(s)) for s in sources])


def _add(
    node: Node,
    name: str,
    flops: int,
    formula: sympy.Expr,
    backward: int,
    backward_formula: sympy.Expr,
    read: Sequence[torch.Tensor],
    out: torch.Tensor,
) -> None:
    node.add_op(
        OpCost(
            op=name,
            pattern=None,
            flops=flops,
            formula=sympy.expand(formula),
            backward_flops=backward,
            backward_formula=sympy.expand(backward_formula),
            bytes_read=sum(tensor_bytes(t) for t in read),
            bytes_written=tensor_bytes(out),
        )
    )


def _matmul(
    node: Node, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
) -> None:
    out = _first_tensor(result)
    tensors = _tensors(args, kwargs)
    if out is None or len(tensors) < 2:
        raise Reason("not a matrix product")
    if name == "linear":
        a, w = tensors[0], tensors[1]
        a_terms, w_terms = node.shape_symbols(a), node.shape_symbols(w)
        k, k_term = a.shape[-1], a_terms[-1]
        out_terms = [*a_terms[:-1], w_terms[0]] if w.dim() == 2 else list(a_terms[:-1])
        operands = [a, w]
    else:
        a, b = (
            (tensors[1], tensors[2])
            if name.startswith("add") or name == "baddbmm"
            else (tensors[0], tensors[1])
        )
        a_terms, b_terms = node.shape_symbols(a), node.shape_symbols(b)
        k, k_term = a.shape[-1], a_terms[-1]
        tail: list[sympy.Expr] = []
        if a.dim() >= 2:
            tail.append(a_terms[-2])
        if b.dim() >= 2:
            tail.append(b_terms[-1])
        batch = broadcast_terms(
            out.shape[: out.dim() - len(tail)],
            [(a.shape[:-2], a_terms[:-2]), (b.shape[:-2], b_terms[:-2])],
        )
        out_terms = [*batch, *tail]
        operands = [a, b]
    if len(out_terms) != out.dim():
        out_terms = [sympy.Integer(s) for s in out.shape]
    flops = 2 * out.numel() * k
    formula = 2 * sympy.Mul(*out_terms) * k_term
    needing = sum(t.requires_grad for t in operands)
    node.set_shape_symbols(out, out_terms)
    _add(node, name, flops, formula, needing * flops, needing * formula, tensors, out)


def _einsum(
    node: Node, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
) -> None:
    equation = args[0] if args else kwargs.get("equation")
    operands = list(args[1:])
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])
    if not isinstance(equation, str) or not isinstance(result, torch.Tensor):
        raise Reason("not an einsum call")
    tensors = [t for t in operands if isinstance(t, torch.Tensor)]
    pattern = _einops_pattern(equation)
    plan = einsum_plan(pattern, len(tensors))
    layout = einsum_layout(plan, tuple(tuple(t.shape) for t in tensors))
    node.add_op(einsum_cost(node, equation, tensors, layout, result))


def _einops_pattern(equation: str) -> str:
    """``"ij,jk->ik"`` as einops spells it: ``"i j, j k -> i k"`` (implicit output too)."""
    equation = equation.replace(" ", "")
    if "->" in equation:
        left, right = equation.split("->")
    else:
        left = equation
        letters = [c for c in left if c.isalpha()]
        right = ("..." if "..." in left else "") + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1)
        )

    return ", ".join(_tokens(p) for p in left.split(",")) + " -> " + _tokens(right)


def _tokens(part: str) -> str:
    """``"b...ij"`` -> ``"b ... i j"``."""
    chunks = part.split("...")
    return " ... ".join(" ".join(chunk) for chunk in chunks).strip()


def _conv(
    node: Node, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
) -> None:
    tensors = _tensors(args, kwargs)
    if not isinstance(result, torch.Tensor) or len(tensors) < 2:
        raise Reason("not a convolution")
    x, w = tensors[0], tensors[1]
    per_output = math.prod(w.shape[1:])
    flops = 2 * result.numel() * per_output
    out_terms = broadcast_terms(result.shape[:1], [(x.shape[:1], node.shape_symbols(x)[:1])])
    out_terms += [node.shape_symbols(w)[0], *(sympy.Integer(s) for s in result.shape[2:])]
    formula = 2 * sympy.Mul(*out_terms) * sympy.Mul(*node.shape_symbols(w)[1:])
    needing = x.requires_grad + w.requires_grad
    node.set_shape_symbols(result, out_terms)
    _add(node, name, flops, formula, needing * flops, needing * formula, tensors, result)


def _attention(
    node: Node, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
) -> None:
    """``F.scaled_dot_product_attention(q, k, v)``: its two matrix products, as
    FlopCounterMode counts the fused kernels (softmax and scaling are not counted)."""
    tensors = _tensors(args, kwargs)
    if not isinstance(result, torch.Tensor) or len(tensors) < 3:
        raise Reason("not an attention call")
    q, k, v = tensors[:3]
    q_terms, k_terms, v_terms = (node.shape_symbols(t) for t in (q, k, v))
    batch = broadcast_terms(
        result.shape[:-2], [(q.shape[:-2], q_terms[:-2]), (k.shape[:-2], k_terms[:-2])]
    )
    points = math.prod(result.shape[:-2]) * q.shape[-2] * k.shape[-2]
    points_term = sympy.Mul(*batch) * q_terms[-2] * k_terms[-2]
    scores, scores_term = 2 * points * q.shape[-1], 2 * points_term * q_terms[-1]
    mixed, mixed_term = 2 * points * v.shape[-1], 2 * points_term * v_terms[-1]
    # Backward, per input that needs a gradient: dV = P^T dO; dQ = dS K and dK = dS^T Q,
    # which both need dP = dO V^T first. With q, k and v all needing grad this is twice
    # the forward, as FlopCounterMode counts the fused backward kernels.
    backward, backward_term = 0, ZERO
    if v.requires_grad:
        backward, backward_term = mixed, mixed_term
    if q.requires_grad or k.requires_grad:
        backward += mixed
        backward_term += mixed_term
        needing = q.requires_grad + k.requires_grad
        backward += needing * scores
        backward_term += needing * scores_term
    out_terms = [*batch, q_terms[-2], v_terms[-1]]
    node.set_shape_symbols(result, out_terms)
    _add(
        node,
        name,
        scores + mixed,
        scores_term + mixed_term,
        backward,
        backward_term,
        [q, k, v],
        result,
    )


def _elementwise(
    node: Node, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
) -> None:
    out = _first_tensor(result)
    if out is None:
        raise Reason("no tensor result")
    if name == "dropout" and not kwargs.get("training", args[2] if len(args) > 2 else True):
        return  # dropout in eval mode returns its input untouched
    tensors = _tensors(args, kwargs)
    terms = _broadcast_terms(node, out, tensors)
    node.set_shape_symbols(out, terms)
    points, formula = out.numel(), sympy.Mul(*terms)
    needing = sum(t.requires_grad for t in tensors)
    _add(node, name, points, formula, needing * points, needing * formula, tensors, out)


def _reduction(
    node: Node, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
) -> None:
    tensors = _tensors(args, kwargs)
    out = _first_tensor(result)
    if out is None or not tensors:
        raise Reason("no tensor result")
    if name in ("max", "min") and len(tensors) > 1:
        _elementwise(node, name, args, kwargs, result)  # torch.max(a, b): elementwise
        return
    x = tensors[0]
    forward_per, backward_per = _REDUCTIONS[name]
    in_formula = sympy.Mul(*node.shape_symbols(x))
    out_terms = _reduced_terms(node, x, out, args, kwargs)
    node.set_shape_symbols(out, out_terms)
    flops, formula = forward_per * x.numel(), forward_per * in_formula
    if name in ("mean", "nanmean"):
        flops, formula = flops + out.numel(), formula + sympy.Mul(*out_terms)
    backward = backward_per * x.numel() if x.requires_grad else 0
    backward_formula = backward_per * in_formula if x.requires_grad else ZERO
    _add(node, name, flops, formula, backward, backward_formula, [x], out)


def _reduced_terms(
    node: Node, x: torch.Tensor, out: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[sympy.Expr]:
    terms = node.shape_symbols(x)
    if out.shape == x.shape:
        return list(terms)
    dim = kwargs.get(
        "dim", args[1] if len(args) > 1 and isinstance(args[1], (int, tuple, list)) else None
    )
    if dim is None:
        return [sympy.Integer(s) for s in out.shape]
    dims = {d % x.dim() for d in ((dim,) if isinstance(dim, int) else dim)}
    if out.dim() == x.dim():  # keepdim
        return [sympy.Integer(1) if i in dims else t for i, t in enumerate(terms)]
    kept = [t for i, t in enumerate(terms) if i not in dims]
    return kept if len(kept) == out.dim() else [sympy.Integer(s) for s in out.shape]


_VIEW_TERMS = frozenset({"transpose", "swapaxes", "swapdims", "permute", "t", "unsqueeze"})


_RESHAPES = _names("reshape view flatten unflatten view_as reshape_as squeeze")


def _views(
    node: Node, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
) -> None:
    """No FLOPs; carry the input's terms where the axis mapping is obvious."""
    if not isinstance(result, torch.Tensor) or not args or not isinstance(args[0], torch.Tensor):
        return
    source = args[0]
    if result is source:
        return
    terms = list(node.shape_symbols(source))
    if result.shape == source.shape:
        node.set_shape_symbols(result, terms)
        return
    rank = source.dim()
    positions = [a for a in args[1:] if isinstance(a, int)]
    if name in ("transpose", "swapaxes", "swapdims") and len(positions) == 2:
        i, j = (p % rank for p in positions)
        terms[i], terms[j] = terms[j], terms[i]
    elif (name == "t" and rank == 2) or name in ("T", "H"):
        terms.reverse()
    elif name in ("mT", "mH") and rank >= 2:
        terms[-2], terms[-1] = terms[-1], terms[-2]
    elif name == "permute":
        order = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else positions
        terms = [terms[p % rank] for p in order]
    elif name == "unsqueeze" and len(positions) == 1:
        terms.insert(positions[0] % (rank + 1), sympy.Integer(1))
    elif name in _RESHAPES and result.numel() == source.numel():
        reshaped = reshaped_terms(node, terms, tuple(source.shape), tuple(result.shape))
        if reshaped is None:
            return
        terms = reshaped
    else:
        return
    if len(terms) == result.dim():
        node.set_shape_symbols(result, terms)
