"""The FLOP rules, one registered function per op family, and the conventions they follow.

Conventions (the only place they are written; the documentation quotes them):

- One FLOP per scalar multiply, add, compare or divide; accumulators start at zero. Only
  floating-point (and complex) values count: ops on integer or boolean tensors (masks,
  counters, indices) cost 0, but for those with a floating-point result, computed at its
  dtype (``torch.arange(n) / n``, ``ids.sum(dtype=torch.float32)``). Matrix products of
  integers are counted as FlopCounterMode counts them, a multiply and an add per term (the
  operations an int8 kernel's peak is given in).
- Ops are counted as they ran, at the level of the kernels torch dispatches (``aten`` ops):
  ``x @ w`` on 3-d ``x`` is one ``mm``; ``torch.einsum`` is the ``bmm`` and ``sum`` torch
  runs; ``F.scaled_dot_product_attention`` is the kernel torch picked for the device.
- Wherever ``torch.utils.flop_counter.FlopCounterMode`` counts an op (the matmul family
  ``mm``/``addmm``/``bmm``/``baddbmm``, convolutions, transposed too, and the fused attention
  kernels, forward and backward) its own formula is used: 2·m·n·k per matrix product, the
  bias of ``addmm`` not counted, attention 2·b·h·s_q·s_k·(d_q + d_v) forward; except where
  it counts other work than the kernel does (:data:`FLOP_COUNTER_CORRECTIONS`): a grouped
  convolution's backward is 2·N for the input's and for the weight's gradient, N the
  grouped iteration space (FlopCounterMode takes the weight's as ungrouped); a
  FlashAttention-2 local window is counted over its pairs (:mod:`.attention_pairs`), and
  a kernel called directly on ``(b, s, h, d)`` tensors in that layout; and what it leaves
  out of a kernel: a convolution's backward adds its bias's gradient, an add per element
  of the output's gradient, as the ``sum`` of a Linear's bias gradient (:mod:`.conv_rules`,
  which also counts the backends' convolution kernels called by name).
- What it leaves at 0 is counted here: an elementwise (pointwise) op costs one FLOP per
  output element (``addcmul``/``addcdiv`` 2, ``lerp`` 3, ``add(x, y, alpha=a)`` 2); a
  reduction one per input element (``mean`` adds a divide per output element,
  ``var``/``std`` 3 per input element and 1 per output, vector norms 2 and 1); an
  activation's backward kernel one op per gradient value (those torch does not tag
  pointwise too: ``leaky_relu_backward``, ``hardtanh_backward``);
  ``mv``/``dot``/``addmv`` 2·m·n; ``addbmm`` 2·b·m·n·k; softmax and log-softmax 5
  per element (max, subtract, exp, sum, divide), their backward 4; layer, group and batch
  norm with batch statistics 5 per element, 2 more with an affine weight and bias, their
  backward 8 (+2 for the weight, +1 for the bias); batch norm with running statistics
  (eval) 2 per element (+2 affine), its input's gradient 2; max pooling a compare per window
  element of each output, average pooling an add per window element and a divide per
  output, adaptive pooling likewise over its windows (``[floor(i·n/o), ceil((i+1)·n/o))``:
  each input element once where the output's size divides the input's), their
  backward an add per gradient value (average: the window's adds and a divide); fused RMS
  norm 3 per element (+1 with a weight); CPU flash attention (which FlopCounterMode counts
  0) like the other fused kernels, over the blocks it computes; ``nll_loss`` one add per
  target (and a divide; with a ``weight`` a multiply more, and an add of the total weight
  for a sum or mean), its backward a value per target (+1 with a ``weight``) (:mod:`.index_rules`);
  accumulating scatters (``index_add``, ``scatter_add``, ``index_put`` with accumulate,
  ``embedding``'s backward) one add per value, and so the backward of reflection and
  replication pads and of nearest upsampling (:mod:`.pad_rules`); an optimizer's
  ``_foreach_*`` ops as their op on each tensor, its fused steps as the ops they fuse
  (:mod:`.optimizer_rules`). Fused losses by their per-element arithmetic
  (:mod:`.loss_rules`); interpolation as nested weighted sums of taps, ``grid_sample``,
  ``affine_grid``, ``cdist`` and ``pdist`` (:mod:`.sampling_rules`); ``renorm``, fractional
  max pooling and ``histc`` (:mod:`.slice_rules`); dense linear algebra by LAPACK
  Working Note 41's counts (:mod:`.linalg_rules`; eigen and singular value decompositions,
  which iterate, are uncounted); ``nn.LSTM``'s fused CPU kernel as the step-by-step LSTM
  cell torch runs elsewhere (:mod:`.rnn_rules`); ``nn.Bilinear``'s ``_trilinear`` and weight
  norm's kernel as they compute (:mod:`.layer_rules`).
- Matrix products (a Cost's ``matmul`` term, each event's ``matmul_flops``): all of a
  matrix-product kernel's count (:attr:`RuleEntry.matmul`: the matmul family, ``mv``,
  ``dot``, ``addbmm``, convolutions, attention), and of a fused kernel, the part its products
  run (:attr:`RuleEntry.matmul_part`, registered by the module of its rule: the LSTM layer's
  gates' products, ``_trilinear``'s ``bmm``s, ``_euclidean_dist``'s product); nothing of
  other ops.
- Complex values in real FLOPs (:mod:`.pointwise_rules`): an add 2, a multiply 6, a divide
  11, other functions 2 per element; a complex matrix product 4 times FlopCounterMode's
  count (a multiply-add is 8).
- Views (those made in place too: ``unsqueeze_``, ``as_strided_``), copies, casts,
  creation, random numbers, indexing, gathers and selects (``where``, ``masked_fill``) cost
  0 FLOPs (:data:`FREE`). Bytes: each op reads its input tensors once and writes its
  outputs once, at their dtypes; an op that returns a view moves 0 bytes.
- Backward is what autograd runs for each op, counted by the same rules: the op is replayed
  on fake tensors and differentiated (a matmul adds 2·m·n·k for each operand that requires
  grad, as FlopCounterMode counts the grad matmuls; ``x + y`` adds nothing; ``relu`` one op
  per element; fused attention its backward kernel, 2.5 times the forward).
- A ``torch.autograd.Function``'s forward ops are counted, and its backward is its own
  ``backward`` run on fake tensors once an op takes its output (or a checked call returns
  it), each call once; one that cannot run on shapes alone is listed as uncounted.
  A TorchScript function's ops go through the dispatcher and are counted like eager ones.
- Nested tensors: an op on a jagged tensor is counted as the ops it runs on its dense values
  (rows only), and its backward, which runs on jagged tensors, is listed as uncounted
  (``mul (backward, jagged)``); an op on a strided nested tensor is counted as its nested
  kernel runs it (attention on a CPU pads every sequence to the longest). A backward is
  predicted from shapes, never values: a jagged attention kernel's backward is taken at the
  longest sequence for every sequence (the bound FlopCounterMode takes for fake offsets).
- Anything else that computes on floating-point values is listed as uncounted, by name,
  never a silent 0. :func:`register_rule` gives an op (or a Python function) a rule.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from torch.utils import flop_counter

from ...errors import SpecError
from . import stand_ins  # noqa: F401  (defines the stand-ins' ops)
from .attention_rules import (
    attention_corrections,
    attention_rules,
    flash_attention_into,
    raw_attention_rules,
)
from .conv_rules import (
    FLOP_COUNTER_CORRECTIONS as CONV_CORRECTIONS,
)
from .conv_rules import (
    conv_backward_rules,
    conv_forward_rules,
    convolution_backward_flops,
)
from .cuda_cells import cuda_cell_rules
from .cudnn_rnn import cudnn_rnn_matmul_parts, cudnn_rnn_rules
from .free_ops import FREE, FREE_OPS, Free
from .grouped_rules import grouped_mm_flops
from .index_rules import index_rules
from .layer_rules import (
    ACTIVATIONS,
    activation_backward,
    batched_sum_of_products,
    is_activation,
    layer_matmul_parts,
    layer_rules,
    norm_backward,
)
from .linalg_rules import linalg_rules
from .loss_rules import loss_rules
from .memo import remembered_shapes
from .opcall import OpCall, Rule
from .optimizer_rules import optimizer_rules
from .pad_rules import pad_rules
from .pointwise_rules import (
    NOT_ARITHMETIC,
    composed_rules,
    is_complex,
    per_element,
    pointwise,
    reduction,
)
from .rnn_rules import rnn_matmul_parts, rnn_rules
from .sampling_rules import READ_NUMBERS, sampling_matmul_parts, sampling_rules
from .skipped_work import SKIPS
from .slice_rules import SLICE_READ_NUMBERS, slice_rules
from .tensors import TensorMeta, map_meta, numel
from .value_rules import value_rules

__all__ = [
    "FLOP_COUNTER_CORRECTIONS",
    "FREE",
    "Free",
    "OpCall",
    "RuleEntry",
    "convolution_backward_flops",
    "declared_flops",
    "find_rule",
    "formula_names",
    "function_rules",
    "is_torch_counted",
    "is_view",
    "register_rule",
]

aten = torch.ops.aten

#: Where FlopCounterMode's formula counts other work than the kernel does, the count
#: typedflops uses, as ``FlopCounterMode(custom_mapping=...)`` takes it: a grouped
#: convolution's backward, and the GPU's attention kernels with ``is_causal``.
FLOP_COUNTER_CORRECTIONS: dict[Any, Callable[..., Any]] = {
    **CONV_CORRECTIONS,
    **attention_corrections(),
}


@dataclass(frozen=True)
class RuleEntry:
    """A registered rule: ``symbolic`` rules compute on :class:`OpCall` shapes (and so give
    formulas); ``raw`` rules are called with the op's real arguments and give counts only."""

    rule: Callable[..., Any]
    symbolic: bool
    source: str
    raw: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    matmul: bool = False  # a matrix-product kernel (matmuls, convolutions, attention)
    # A fused kernel's matrix products, part of its count (``mkldnn_rnn_layer``'s gates'
    # products): a rule on the same call, symbolic as ``rule`` is.
    matmul_part: Rule | None = None

    def count(
        self, call: OpCall, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any
    ) -> int:
        """The FLOPs of one call that ran."""
        ran = self.extra.get("ran")
        # (a kernel that skips entries by value: what ran, where the values are known)
        value = None if ran is None else ran(call, args, kwargs)
        if value is None:
            if self.source == "torch" and self.raw:
                value = self.rule(*args, **kwargs, out_val=out)
            elif self.raw:
                value = self.rule(*args, **kwargs)
            else:
                value = self.rule(call)
        return _as_count(value, self.extra.get("name", call.name))

    def matmul_count(self, call: OpCall, flops: int) -> int:
        """The part of ``flops``, this entry's count of ``call``, that matrix products
        run (the FLOPs an MFU counts): all of it for a matrix-product kernel, the fused
        kernel's own part, else 0."""
        if self.matmul:
            return flops
        if self.matmul_part is None:
            return 0
        return _as_count(self.matmul_part(call), self.extra.get("name", call.name))


def _as_count(value: Any, name: str) -> int:
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise SpecError.at(
            None, f"the FLOP rule of {name} returned {value!r}; a rule returns a number of FLOPs"
        ) from None
    if count != value or count < 0:
        raise SpecError.at(
            None, f"the FLOP rule of {name} returned {value!r}; FLOPs are a non-negative integer"
        )
    return count


# -- rules of torch's FlopCounterMode ----------------------------------------------------


def _shape(value: Any) -> Any:
    return value.shape if isinstance(value, TensorMeta) else value


def _torch_shape_rule(formula: Callable[..., Any]) -> Rule:
    def rule(call: OpCall) -> Any:
        args = map_meta(call.args, _shape)
        kwargs = {k: map_meta(v, _shape) for k, v in call.kwargs.items()}
        count = formula(*args, out_shape=map_meta(call.out, _shape), **kwargs)
        return _COMPLEX_PRODUCT * count if is_complex(call.inputs) else count

    return rule


def _torch_entries() -> dict[Any, RuleEntry]:
    entries: dict[Any, RuleEntry] = {}
    for target, wrapped in flop_counter.flop_registry.items():
        inner = getattr(wrapped, "__wrapped__", None)
        if inner is not None:  # a shape formula, wrapped by FlopCounterMode's shape_wrapper
            entries[target] = RuleEntry(
                _torch_shape_rule(remembered_shapes(inner)),
                symbolic=True,
                source="torch",
                matmul=True,
            )
        else:
            entries[target] = RuleEntry(
                wrapped, symbolic=False, source="torch", raw=True, matmul=True
            )
    return entries


# -- rules for what FlopCounterMode leaves at 0 -------------------------------------------

# A complex multiply-add is 8 real FLOPs (a product 6, an add 2) where a real one is 2.
_COMPLEX_PRODUCT = 4


def _matrix_vector(call: OpCall) -> Any:
    scale = _COMPLEX_PRODUCT if is_complex(call.inputs) else 1
    if call.name == "addmv":
        return scale * 2 * numel(call.inputs[1])
    return scale * 2 * numel(call.inputs[0])  # mv: 2·m·n; dot, vdot: 2·n


def _outer(call: OpCall) -> Any:
    # addr: a product and an add per output element (complex: a multiply 6, an add 2)
    return (8 if is_complex(call.inputs) else 2) * numel(call.output)


def _rms_norm(call: OpCall) -> Any:
    x = call.inputs[0]
    weight = call.arg(2, "weight")
    return (3 + (weight is not None)) * numel(x)


def _builtin_entries() -> dict[Any, RuleEntry]:
    def entry(rule: Rule, matmul: bool = False) -> RuleEntry:
        return RuleEntry(rule, symbolic=True, source="typedflops", matmul=matmul)

    table: dict[Any, RuleEntry] = {}
    for name in ("mv", "dot", "vdot", "addmv"):
        table[getattr(aten, name)] = entry(_matrix_vector, matmul=True)
    table[aten.addr] = entry(_outer)
    table[aten.addbmm] = entry(batched_sum_of_products, matmul=True)
    for name in ACTIVATIONS:  # (activations torch does not tag pointwise)
        table[getattr(aten, name)] = entry(pointwise)
    table[aten.rrelu_with_noise_functional] = entry(pointwise)  # (its functional form)
    table[aten.rsub] = entry(pointwise)  # (``y - alpha * x``, not tagged pointwise either)
    # a GPU's fused dropout: the mask's multiply and the scale's, as a CPU's ``div_`` and ``mul``
    table[aten.native_dropout] = entry(per_element(2))
    table[aten._fused_dropout] = entry(per_element(2))  # (its older form)
    for name in ("_softmax", "_log_softmax", "_safe_softmax"):
        table[getattr(aten, name)] = entry(per_element(5))
    for name in ("_softmax_backward_data", "_log_softmax_backward_data"):
        table[getattr(aten, name)] = entry(per_element(4))
    for name in ("cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"):
        table[getattr(aten, name)] = entry(per_element(1))
    for target, rule in attention_rules().items():
        table[target] = entry(rule, matmul=True)
    for target, rule in layer_rules().items():
        table[target] = entry(rule)
    for target, rule in conv_forward_rules().items():  # (backends' kernels called by name)
        table[target] = entry(rule, matmul=True)
    for target, (rule, products) in conv_backward_rules().items():
        table[target] = dataclasses.replace(entry(rule), matmul_part=products)
    rulesets = [loss_rules(), sampling_rules(), linalg_rules(), rnn_rules(), pad_rules()]
    rulesets += [index_rules(), slice_rules()]
    rulesets += [cudnn_rnn_rules(), cuda_cell_rules(), optimizer_rules()]
    for rules in rulesets:
        for target, rule in rules.items():
            table[target] = entry(rule)
    for target, skip in SKIPS.items():  # (what ran read from the values, where known)
        if target in table:  # (an in-place form takes its out-of-place form's entry)
            table[target].extra["ran"] = skip.counter(table[target].rule)
    matmul_parts = (layer_matmul_parts(), sampling_matmul_parts(), rnn_matmul_parts())
    for parts in (*matmul_parts, cudnn_rnn_matmul_parts()):
        for target, part in parts.items():  # (fused kernels, part matrix products)
            table[target] = dataclasses.replace(table[target], matmul_part=part)
    for target, names in {**READ_NUMBERS, **SLICE_READ_NUMBERS}.items():  # (keyed by values)
        table[target].extra["values"] = names
    raw_attention = raw_attention_rules()
    into = getattr(aten, "_flash_attention_forward_no_dropout_inplace", None)
    if into is not None:  # (torch 2.13 and later)
        raw_attention[into] = flash_attention_into
    for target, raw in raw_attention.items():  # (kernels called directly, by their arguments)
        table[target] = RuleEntry(raw, symbolic=False, source="typedflops", raw=True, matmul=True)
    table[aten._grouped_mm] = RuleEntry(
        grouped_mm_flops, symbolic=False, source="typedflops", raw=True, matmul=True
    )
    for target, rule in value_rules().items():  # (counted from their values)
        table[target] = RuleEntry(rule, symbolic=False, source="typedflops", raw=True)
    table[aten._fused_rms_norm] = entry(_rms_norm)
    table[aten._fused_rms_norm_backward] = entry(norm_backward)
    # Their stand-ins in dry runs for a CUDA device (stand_ins.py), counted alike.
    table[torch.ops.typedflops._fused_rms_norm] = entry(_rms_norm)
    table[torch.ops.typedflops._fused_rms_norm_backward] = entry(norm_backward)
    for target, rule in composed_rules().items():
        table[target] = entry(rule)
    return table


def _saved_bytes(call: OpCall) -> Any:
    tensor = call.inputs[0]
    return numel(tensor) * tensor.itemsize


#: The bytes of a tensor autograd saves for backward (activation memory), fitted like FLOPs.
saved_bytes_rule = RuleEntry(_saved_bytes, symbolic=True, source="typedflops")


# FlopCounterMode's formulas, then the built-in rules (which replace the few of its formulas
# that count other work than the kernel does: see conv_rules), by op packet.
_RULES: dict[Any, RuleEntry] = {**_torch_entries(), **_builtin_entries()}
_USER: dict[Any, RuleEntry] = {}
_USER_FUNCTIONS: dict[Any, RuleEntry] = {}


def is_torch_counted(packet: Any) -> bool:
    """Whether ``FlopCounterMode`` has a formula for this op (a parity check counts these)."""
    return packet in flop_counter.flop_registry


def _base_name(func: torch._ops.OpOverload) -> str:
    return str(func._overloadpacket.__name__)


@functools.lru_cache(maxsize=4096)
def find_rule(func: torch._ops.OpOverload) -> RuleEntry | Free | None:
    """The rule for an op: a :class:`RuleEntry`, :data:`FREE` for a zero-FLOP op, or None.

    Order: a user rule (for the overload, then its packet), the rule of the op's packet,
    zero-FLOP ops (views, in-place views such as ``unsqueeze_``, copies, creation, random
    numbers), then pointwise and reduction ops by their torch tags (an in-place op as its
    out-of-place form).
    """
    packet = func._overloadpacket
    user = _USER.get(func) or _USER.get(packet)
    if user is not None:
        return user
    entry = _RULES.get(packet)
    if entry is not None:
        return entry
    name = _base_name(func)
    inplace = name.endswith("_") and not name.startswith("_") and name != "_"
    base = name[:-1] if inplace else name
    tags = set(func.tags)
    outplace = getattr(aten, base, None) if inplace and base not in NOT_ARITHMETIC else None
    if outplace is not None:
        entry = _RULES.get(outplace)  # (``rrelu_with_noise_`` as ``rrelu_with_noise``)
        if entry is not None:
            return entry
    if packet in _SEEDED_KERNELS:
        return None  # (a kernel with random numbers inside, no rule: named, not 0)
    if base in FREE_OPS or name in FREE_OPS or is_view(func) or tags & _FREE_TAGS:
        return FREE
    if outplace is not None:
        tags |= {tag for overload in _overloads(outplace) for tag in overload.tags}
    if torch.Tag.pointwise in tags:
        if base in NOT_ARITHMETIC:
            return FREE
        return RuleEntry(pointwise, symbolic=True, source="typedflops", extra={"name": base})
    if torch.Tag.reduction in tags:
        return RuleEntry(reduction, symbolic=True, source="typedflops", extra={"name": base})
    if base.endswith("_backward") and is_activation(base.removesuffix("_backward")):
        return RuleEntry(activation_backward, symbolic=True, source="typedflops")
    return None


# Creation with random values, copies of views, and views made in place (``unsqueeze_``,
# ``as_strided_``, ``t_``): 0 FLOPs.
_FREE_TAGS = frozenset(
    {torch.Tag.nondeterministic_seeded, torch.Tag.view_copy, torch.Tag.inplace_view}
)
# Kernels tagged as seeded (random numbers inside: dropout) that compute more than random
# values, with no rule here: listed uncounted rather than 0 (an AMD GPU's and a Mac's
# recurrent layers, cuDNN's and Triton's attention kernels called directly, a nested
# tensor's softmax).
_SEEDED_KERNELS = frozenset(
    {
        aten.miopen_rnn,
        aten._lstm_mps,
        aten._cudnn_attention_forward,
        aten._cudnn_attention_backward,
        aten._triton_scaled_dot_attention,
        aten._nested_tensor_softmax_with_shape,
    }
)


def _overloads(packet: Any) -> list[Any]:
    return [getattr(packet, name) for name in packet.overloads()]


@functools.lru_cache(maxsize=4096)
def is_view(func: torch._ops.OpOverload) -> bool:
    """Whether an op returns a view of its input, moving no bytes: a view op, a view made in
    place (``unsqueeze_``), or ``_unsafe_view`` (a view of a tensor just made: the copy
    before it moved the bytes)."""
    if func._overloadpacket is aten._unsafe_view or torch.Tag.inplace_view in func.tags:
        return True
    returns = func._schema.returns
    return bool(returns) and all(
        r.alias_info is not None and not r.alias_info.is_write for r in returns
    )


def function_rules() -> dict[Any, tuple[Any, RuleEntry]]:
    """Rules registered for Python functions, by code object: ``code -> (function, rule)``."""
    found = {}
    for fn, entry in _USER_FUNCTIONS.items():
        code = getattr(inspect.unwrap(fn), "__code__", None)
        if code is not None:
            found[code] = (fn, entry)
    return found


def register_rule(target: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give an op, or a Python function, a FLOP rule (a decorator).

    ``target`` is a torch op overload or packet (``torch.ops.mylib.fused.default``,
    ``torch.ops.mylib.fused``), a ``torch.library.custom_op``, or a Python function. The
    decorated ``rule(*args, **kwargs)`` receives the call's arguments (real or fake tensors)
    and returns its forward FLOPs as an int. A registered op is counted (its backward is
    what its autograd formula runs, counted by the rules) and no longer listed as uncounted;
    a registered Python function's count replaces the count of the ops it runs.

    >>> import torch
    >>> @torch.library.custom_op("typedflops_doc::scale", mutates_args=())
    ... def scale(x: torch.Tensor) -> torch.Tensor:
    ...     return x * 2
    >>> @scale.register_fake
    ... def _(x):
    ...     return torch.empty_like(x)
    >>> @register_rule(scale)
    ... def scale_flops(x):
    ...     return x.numel()
    >>> from typedflops import record
    >>> with record() as rec:
    ...     _ = scale(torch.ones(4, 3))
    >>> rec.total.flops, rec.total.uncounted
    (12, ())
    """
    key = _op_key(target)

    def decorate(rule: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(rule):
            raise SpecError.at(f"register_rule({target!r})", "the rule must be callable")
        entry = RuleEntry(
            rule, symbolic=False, source="user", raw=True, extra={"name": _label(key)}
        )
        if key is None:
            _USER_FUNCTIONS[target] = entry
        else:
            _USER[key] = entry
        find_rule.cache_clear()
        return rule

    return decorate


def _op_key(target: Any) -> Any:
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return target
    op = getattr(target, "_opoverload", None)  # torch.library.custom_op
    if isinstance(op, torch._ops.OpOverload):
        return op
    if callable(target):
        if getattr(inspect.unwrap(target), "__code__", None) is None:
            raise SpecError.at(
                f"register_rule({target!r})",
                "a Python function needs Python code to be seen running",
                hint="give the rule to the op it calls instead",
            )
        return None
    raise SpecError.at(
        f"register_rule({target!r})",
        "the target must be a torch op (torch.ops.lib.name), a torch.library.custom_op or a "
        "Python function",
    )


def _label(key: Any) -> str:
    if key is None:
        return "function"
    packet = getattr(key, "_overloadpacket", key)
    return str(getattr(packet, "__name__", key))


def op_name(func: torch._ops.OpOverload) -> str:
    """An op's name as tables show it: ``mm``, ``add``, ``mylib.fused`` (a stand-in of
    ours by the ``aten`` kernel's name it stands for)."""
    packet = func._overloadpacket
    namespace = getattr(packet, "_qualified_op_name", "aten::").split("::")[0]
    name = _base_name(func)
    return name if namespace in ("aten", "typedflops") else f"{namespace}.{name}"


def declared_flops(function: str, formula: sympy.Expr, dims: Mapping[str, int]) -> int:
    """The count a ``flops=`` formula gives at ``dims``, or a SpecError where it is negative
    (a formula that is negative for every size is refused at decoration instead) or not a
    whole number (``n/2`` at an odd ``n``: ``n//2`` rounds down).

    >>> declared_flops("f", sympy.sympify("n - d"), {"n": 4, "d": 3})
    1
    >>> declared_flops("f", sympy.sympify("n - d"), {"n": 2, "d": 3})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
      ...
    typedflops.errors.SpecError: f(): flops=-d + n gives -1 FLOPs at n=2, d=3; a count is ...
    >>> declared_flops("f", sympy.sympify("n*d/2"), {"n": 3, "d": 3})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
      ...
    typedflops.errors.SpecError: f(): flops=d*n/2 gives 9/2 FLOPs at n=3, d=3; a count is a ...
    """
    used = formula_names(formula)
    return _declared_at(function, formula, tuple((n, s) for n, s in dims.items() if n in used))


@functools.lru_cache(maxsize=512)
def formula_names(formula: sympy.Expr) -> frozenset[str]:
    """The names of the dims ``formula`` counts in (kept: read on each recorded call)."""
    return frozenset(str(symbol) for symbol in formula.free_symbols)


@functools.lru_cache(maxsize=4096)  # (a recorded call's count: before its body and after)
def _declared_at(function: str, formula: sympy.Expr, dims: tuple[tuple[str, int], ...]) -> int:
    value = formula.xreplace({sympy.Symbol(name): size for name, size in dims})
    if value >= 0 and value.is_integer:
        return int(value)
    shown = ", ".join(f"{name}={size}" for name, size in dims)
    gives = f"flops={formula} gives {value} FLOPs at {shown}"
    if value < 0:
        raise SpecError.at(f"{function}()", f"{gives}; a count is never negative")
    raise SpecError.at(
        f"{function}()",
        f"{gives}; a count is a whole number",
        hint="round it in the formula: // rounds down",
    )


def count_of(value: Any) -> int:
    """An int count (a symbolic rule at int sizes gives a sympy Integer)."""
    return math.floor(value) if not isinstance(value, int) else value
