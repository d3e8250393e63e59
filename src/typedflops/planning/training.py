"""What a training step holds in memory, as numbers and as formulas in the model's dims.

A step holds the parameters, their gradients, the optimizer's state (and, in mixed
precision, an fp32 master copy of the parameters), and the activations autograd saves for
backward. Parameters are counted from the module, as a formula in its own dims for the
typed modules of :mod:`typedflops.nn` (each parameter's size is fitted from the module
rebuilt on ``meta`` at other sizes); activations come from a dry run of the step's forward
(:attr:`Cost.activation_bytes`, each saved storage once).

Their sum (``total``, a formula) is the memory of every term held at once. The step's
``peak`` is found allocation by allocation instead: parameters, optimizer state and master
weights live through the step; forward and backward are run on ``meta`` and every storage
they make is counted while it lives (activations, gradients, and the temporaries backward
makes, such as the logits' gradient); the optimizer's step holds the gradients and a
temporary the size of its state tensors (the ``foreach`` implementations torch uses on a
GPU). The larger of the two phases is the peak.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import sympy
import torch

from .. import devices
from ..cost.engine.fit import Plan, fit_count
from ..cost.engine.kernels import (
    describe_kernels,
    device_type_of,
    kernels_of,
    meta_capability,
    meta_target,
)
from ..cost.engine.module_sizes import module_dims, module_repeats
from ..cost.types import Cost, Term
from ..decorator import TypedFunction
from ..errors import SpecError
from ..text import dtype_name, format_count, text_table, wrap_lines
from .peak import forward_backward_peak

__all__ = [
    "MEMORY_TERMS",
    "OPTIMIZER_STATES",
    "PLANNED_DEVICE",
    "ParameterCount",
    "TrainingMemory",
    "measure_peak",
    "optimizer_key",
    "parameter_count",
    "peak_at",
    "training_memory",
]

#: Tensors of optimizer state kept per parameter (Adam: first and second moments).
OPTIMIZER_STATES: dict[str | None, int] = {
    None: 0,
    "sgd": 0,
    "momentum": 1,
    "adagrad": 1,
    "rmsprop": 1,
    "adam": 2,
    "adamw": 2,
}


def optimizer_key(optimizer: str | None, where: str) -> str | None:
    """``optimizer``'s key in :data:`OPTIMIZER_STATES` (any case), or a SpecError at ``where``.

    >>> optimizer_key("AdamW", "f()")
    'adamw'
    """
    key = optimizer.lower() if optimizer is not None else None
    if key not in OPTIMIZER_STATES:
        known = ", ".join(sorted(k for k in OPTIMIZER_STATES if k))
        raise SpecError.at(where, f"unknown optimizer {optimizer!r}", hint=f"known: {known}")
    return key


#: The terms of a step's memory, in the order tables show them.
MEMORY_TERMS = ("parameters", "gradients", "optimizer", "master_weights", "activations")

#: The device a plan is for when none is named (``plan()``, ``plan_parallel()``, and the
#: kernels a dry run of a model on ``meta`` costs).
PLANNED_DEVICE = "H100 SXM"

_SIXTEEN_BIT = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class ParameterCount:
    """A module's parameters (scalars): all of them and the trainable ones, as numbers and
    as formulas in its own dims (numbers where it declares none)."""

    total: int
    trainable: int
    formula: sympy.Expr
    trainable_formula: sympy.Expr

    @property
    def all(self) -> Term:
        """Every parameter: the count with its formula."""
        return Term(self.total, self.formula)

    @property
    def trainable_term(self) -> Term:
        """The trainable parameters: the count with its formula."""
        return Term(self.trainable, self.trainable_formula)


def _counts(module: torch.nn.Module) -> dict[str, tuple[int, bool]]:
    return {name: (p.numel(), p.requires_grad) for name, p in module.named_parameters()}


def _repeated_list(module: torch.nn.Module, count: int) -> str | None:
    """The name of the module's ``ModuleList`` of ``count`` blocks, if there is one."""
    found = [
        name
        for name, sub in module.named_children()
        if isinstance(sub, torch.nn.ModuleList) and len(sub) == count
    ]
    return found[0] if len(found) == 1 else None


def parameter_count(module: torch.nn.Module) -> ParameterCount:
    """The module's parameter count, with formulas in its own dims where it declares them.

    For a typed module (``typedflops_dims()`` and ``typedflops_resized()``), the module is
    rebuilt on ``meta`` with each dim changed and each parameter's size fitted as a product
    of dims; a ``ModuleList`` of identical blocks whose length is a declared dim
    (``n_layers``) is counted as that dim times one block (rebuilt with one layer, so this
    is fast for any depth). Tied parameters count once.

    >>> from typedflops.nn import MLP
    >>> parameter_count(MLP(8, 32)).formula
    2*d_ff*d_model + d_ff + d_model
    """
    counts = _counts(module)
    total = sum(size for size, _ in counts.values())
    trainable = sum(size for size, grad in counts.values() if grad)
    numbers = ParameterCount(total, trainable, sympy.Integer(total), sympy.Integer(trainable))
    own = module_dims(module)
    resize = getattr(module, "typedflops_resized", None)
    if not own or not callable(resize):
        return numbers
    repeats = {name: value for name, value in module_repeats(module).items() if name in own}
    layers = next(iter(repeats), None)
    blocks = _repeated_list(module, own[layers]) if layers is not None else None
    if layers is None or blocks is None:
        layers, blocks = None, None
    base = {**own, **({layers: 1} if layers is not None else {})}
    varied = [name for name in own if name != layers]
    rebuild = cast(Callable[[Mapping[str, int]], torch.nn.Module], resize)
    with torch.device("meta"):
        runs = [_counts(rebuild(base))]
        assignments: list[dict[str, Any]] = [dict(base)]
        used: list[str] = []
        for name in varied:
            for candidate in (2 * base[name], base[name] + 1):
                with contextlib.suppress(Exception):
                    runs.append(_counts(rebuild({**base, name: candidate})))
                    assignments.append({**base, name: candidate})
                    used.append(name)
                    break
        check = {**base, **{name: 3 * base[name] for name in used}}
        with contextlib.suppress(Exception):
            runs.append(_counts(rebuild(check)))
            assignments.append(check)
    checked = len(runs) == len(used) + 2
    if any(list(run) != list(runs[0]) for run in runs):
        return numbers  # the parameters' names change with the sizes: no formula
    plan = Plan(assignments, [[] for _ in runs], used, checked)
    formula: sympy.Expr = sympy.Integer(0)
    trainable_formula: sympy.Expr = sympy.Integer(0)
    prefix = f"{blocks}.0." if blocks is not None else None
    original = {name: grad for name, (_, grad) in counts.items()}
    for name in runs[0]:
        size, exact = fit_count(plan, [run[name][0] for run in runs])
        if not exact:
            return numbers
        inside = prefix is not None and name.startswith(prefix)
        term = size * sympy.Symbol(layers) if inside and layers is not None else size
        formula += term
        if _trainable(name, prefix, blocks, original):
            trainable_formula += term
    values = {sympy.Symbol(name): value for name, value in own.items()}
    if formula.xreplace(values) != total or trainable_formula.xreplace(values) != trainable:
        return numbers
    return ParameterCount(total, trainable, sympy.factor(formula), sympy.factor(trainable_formula))


def _trainable(
    name: str, prefix: str | None, blocks: str | None, original: dict[str, bool]
) -> bool:
    if prefix is None or blocks is None or not name.startswith(prefix):
        return original.get(name, True)
    rest = name[len(prefix) :]
    flags = [
        grad
        for key, grad in original.items()
        if key.startswith(f"{blocks}.") and key.endswith(f".{rest}")
    ]
    return all(flags) if flags else True


@dataclass(frozen=True)
class TrainingMemory:
    """The bytes one training step holds at its peak, by term, with formulas in the dims.

    ``terms`` has the keys of :data:`MEMORY_TERMS` and ``"total"`` (all the terms held at
    once), each a :class:`~typedflops.cost.types.Term` (its bytes and their formula, read
    by key as ``bytes`` and ``formulas``); ``parameters`` counts the model's parameters;
    ``cost`` is the dry run of the step's forward (its FLOPs, backward and recomputed FLOPs,
    and activation bytes). ``peak`` is the step's peak allocation by allocation (see the
    module's doc): the held terms plus ``forward_backward`` (the most forward and backward
    hold at once, gradients included) or the optimizer's step, whichever holds more. It is
    the steady state: the optimizer's state and master weights exist, as from the second
    step on.
    ``kernels`` is the device type whose kernels the dry runs cost (``"cuda"``, ``"cpu"``),
    ``capability`` the compute capability of the GPU they cost (None: not known, costed
    as an A100's), on which torch's choice of attention kernel depends.
    """

    terms: Mapping[str, Term]
    dims: Mapping[str, int]
    parameters: ParameterCount
    cost: Cost
    dtype: torch.dtype
    optimizer: str | None
    mixed_precision: bool = field(default=False)
    peak: int = 0
    forward_backward: int = 0
    optimizer_temporary: int = 0
    kernels: str | None = None
    capability: tuple[int, int] | None = None

    @property
    def bytes(self) -> dict[str, int]:
        """Each term's bytes, by the keys of :data:`MEMORY_TERMS` and ``"total"``."""
        return {key: term.count for key, term in self.terms.items()}

    @property
    def formulas(self) -> dict[str, sympy.Expr]:
        """Each term's bytes as a formula in the dims, by the same keys."""
        return {key: term.formula for key, term in self.terms.items()}

    @property
    def total(self) -> int:
        """All the terms together, as if each were held at once."""
        return self.terms["total"].count

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (formulas as strings)."""
        return {
            "bytes": dict(self.bytes),
            "formulas": {key: str(value) for key, value in self.formulas.items()},
            "dims": dict(self.dims),
            "parameters": self.parameters.total,
            "trainable_parameters": self.parameters.trainable,
            "parameter_formula": str(self.parameters.formula),
            "dtype": dtype_name(self.dtype),
            "optimizer": self.optimizer,
            "mixed_precision": self.mixed_precision,
            "peak": self.peak,
            "forward_backward": self.forward_backward,
            "kernels": self.kernels,
            "capability": None if self.capability is None else list(self.capability),
        }

    def rows(self, size: Callable[[int], str]) -> list[list[str]]:
        """A table's rows: each term shown (master weights only under mixed precision), the
        total and the peak, as ``[label, size(bytes), note]``."""
        rows = [[key.replace("_", " "), size(self.bytes[key]), ""] for key in self._shown_terms()]
        rows[-1][2] = "every term held at once"
        rows.append(["peak", size(self.peak), "allocation by allocation, steady state"])
        return rows

    def notes(self) -> list[str]:
        """What the figures assume, in words: the peak's steady state, why it can exceed
        the total, and the kernels costed."""
        return [
            "peak: the most held at once, from the second step on (the optimizer's state "
            "exists; a first step peaks lower); above total when backward's temporaries "
            "(the logits' gradient, a product's output before it is added) outweigh the "
            "activations already freed",
            f"kernels costed: {describe_kernels(self.kernels, self.capability)}",
        ]

    def table(self) -> str:
        """The terms as a table of bytes, then each term's formula on a line of its own
        (whole, to be copied, however long)."""
        shown = ", ".join(f"{name}={size}" for name, size in self.dims.items())
        return "\n".join(
            [
                text_table(["memory", "bytes", ""], self.rows(_bytes), right={1}),
                *(wrap_lines(note, 100) for note in self.notes()),
                wrap_lines(f"formulas, in {shown}:", 100),
                *(
                    f"  {key.replace('_', ' ')}: {self.formulas[key]}"
                    for key in self._shown_terms()
                ),
            ]
        )

    def _shown_terms(self) -> list[str]:
        return [
            key
            for key in (*MEMORY_TERMS, "total")
            if key != "master_weights" or self.mixed_precision
        ]

    def __str__(self) -> str:
        return self.table()


def _bytes(value: int) -> str:
    return f"{format_count(value)}B"


def _step_function(model: torch.nn.Module) -> TypedFunction[..., Any]:
    for name in ("loss", "forward"):
        found = getattr(type(model), name, None)
        if isinstance(found, TypedFunction):
            return found
    raise SpecError.at(
        "training_memory()",
        f"{type(model).__name__} has no @typed_flops forward (or loss) method to dry-run",
        hint="decorate its forward with @typed_flops",
    )


def training_memory(
    model: torch.nn.Module,
    optimizer: str | None = "adamw",
    dtype: torch.dtype | None = None,
    *,
    master_weights: bool | None = None,
    kernels: str | devices.DeviceSpec | None = None,
    **dims: Any,
) -> TrainingMemory:
    """The memory of one training step of ``model`` at ``dims`` (``batch=``, ``seq=``...).

    The step's forward (the model's typed ``loss`` method if it has one, else its
    ``forward``) is dry-run on ``meta`` in ``dtype`` (default: the parameters' dtype), so a
    model built on ``meta`` at any size is costed without memory. Parameters and gradients
    are held in ``dtype``; with a 16-bit ``dtype`` the step is mixed precision (as in
    Megatron-LM and ZeRO): an fp32 master copy of the trainable parameters
    (``master_weights``, default True for 16-bit) and fp32 optimizer state
    (``OPTIMIZER_STATES[optimizer]`` tensors per parameter: AdamW's two moments), so AdamW
    costs 16 bytes per parameter besides the activations. With ``master_weights=False``
    the optimizer steps the 16-bit parameters themselves and ``torch.optim`` keeps its
    state in their dtype: AdamW costs 8 bytes per parameter.

    ``kernels`` is the device whose kernels the dry runs cost: a device type (``"cuda"``,
    ``"cpu"``), a device of the table (``"H100 SXM"``, a :class:`~typedflops.devices.DeviceSpec`:
    attention as torch picks it on that GPU's compute capability); by default those of an
    enclosing :func:`~typedflops.planning.kernels_of`, else of the model's device, and for
    a model on ``meta`` those of :data:`PLANNED_DEVICE` (an H100, as ``plan()`` assumes).

    >>> from typedflops.nn import TransformerConfig, TransformerLM
    >>> config = TransformerConfig.gpt2(vocab=64, context=8, d_model=16, n_layers=2,
    ...                                 n_heads=2)
    >>> memory = training_memory(TransformerLM(config), "adamw", batch=2, seq=8)
    >>> memory.formulas["optimizer"] == 8 * memory.parameters.trainable_formula
    True
    """
    key = optimizer_key(optimizer, "training_memory()")
    parameters = list(model.parameters())
    step_dtype = dtype or (parameters[0].dtype if parameters else torch.float32)
    if not step_dtype.is_floating_point:
        raise SpecError.at("training_memory()", f"dtype={step_dtype} is not a floating-point dtype")
    mixed = step_dtype in _SIXTEEN_BIT
    master = mixed if master_weights is None else master_weights
    function = _step_function(model)
    target, capability = _kernels(kernels, parameters)
    with kernels_of(target, capability):
        return _training_memory(
            model, function, key, step_dtype, master, (target, capability), dims
        )


def _kernels(
    kernels: str | devices.DeviceSpec | None, parameters: list[torch.nn.Parameter]
) -> tuple[str, tuple[int, int] | None]:
    """The device type and GPU compute capability whose kernels a step is costed with."""
    if kernels is None:
        enclosing = meta_target()
        if enclosing is not None:
            return enclosing, meta_capability()
        found = parameters[0].device.type if parameters else "meta"
        if found == "meta":
            kernels = PLANNED_DEVICE
        else:  # this machine's device: torch is asked
            nvidia = found == "cuda" and not torch.version.hip  # ROCm reports its gfx version
            gpu = torch.cuda.get_device_capability(parameters[0].device) if nvidia else None
            return found, gpu
    if isinstance(kernels, str) and kernels in ("cuda", "cpu", "meta"):
        return kernels, None
    spec = devices.resolve(kernels)
    return device_type_of(spec), spec.capability


def _training_memory(
    model: torch.nn.Module,
    function: TypedFunction[..., Any],
    key: str | None,
    step_dtype: torch.dtype,
    master: bool,
    kernels: tuple[str, tuple[int, int] | None],
    dims: dict[str, Any],
) -> TrainingMemory:
    cost = function.estimate(model, dtype=step_dtype, **dims)
    recomputed = _recomputed(model, step_dtype, dims) if cost.recompute_flops else None
    count = parameter_count(model)
    size = torch.empty((), dtype=step_dtype).element_size()
    # The optimizer's state has the dtype of the weights it steps: the fp32 master copy
    # when there is one, else the parameters (torch.optim's zeros_like(param)).
    state_size = 4 if master else size
    states = OPTIMIZER_STATES[key]
    trainable = count.trainable_term
    terms: dict[str, Term] = {
        "parameters": count.all.scaled(size),
        "gradients": trainable.scaled(size),
        "optimizer": trainable.scaled(states * state_size),
        "master_weights": trainable.scaled(4 if master else 0),
        "activations": cost.activation + recomputed if recomputed else cost.activation,
    }
    summed = sum(terms.values(), Term(0, sympy.Integer(0)))
    terms["total"] = Term(summed.count, sympy.factor(sympy.expand(summed.formula)), summed.exact)
    forward_backward = forward_backward_peak(function, model, step_dtype, dims)
    temporary = state_size * count.trainable if states else 0
    values = {**{str(k): v for k, v in cost.dims.items()}, **module_dims(model)}
    used = {str(s) for s in terms["total"].formula.free_symbols}
    shown = {name: values[name] for name in sorted(used)}
    return TrainingMemory(
        terms=terms,
        dims={**cost.dims, **shown},
        parameters=count,
        cost=cost,
        dtype=step_dtype,
        optimizer=key,
        mixed_precision=master,
        peak=_peak(terms, forward_backward, temporary),
        forward_backward=forward_backward,
        optimizer_temporary=temporary,
        kernels=kernels[0],
        capability=kernels[1],
    )


def _peak(terms: Mapping[str, Term], forward_backward: int, temporary: int) -> int:
    """The peak of a step: what is held throughout (parameters, optimizer state, master
    weights) plus the larger of forward and backward (``forward_backward``) and the
    optimizer's step (the gradients and its ``temporary`` bytes)."""
    held = sum(terms[key].count for key in ("parameters", "optimizer", "master_weights"))
    return held + max(forward_backward, terms["gradients"].count + temporary)


def peak_at(model: torch.nn.Module, memory: TrainingMemory, **dims: Any) -> int:
    """The peak of ``memory``'s step at other ``dims`` (``batch=``, ``seq=``...: every size
    its step takes, as for :func:`training_memory`): the held terms, which do not change,
    plus the larger of a new forward-and-backward run on ``meta`` and the optimizer's step.
    ``model`` is the one ``memory`` was found for.

    >>> from typedflops.nn import TransformerConfig, TransformerLM
    >>> config = TransformerConfig.gpt2(vocab=64, context=8, d_model=16, n_layers=2,
    ...                                 n_heads=2)
    >>> model = TransformerLM(config)
    >>> memory = training_memory(model, "adamw", batch=2, seq=8)
    >>> peak_at(model, memory, batch=2, seq=8) == memory.peak
    True
    """
    with kernels_of(memory.kernels, memory.capability):
        function = _step_function(model)
        forward_backward = forward_backward_peak(function, model, memory.dtype, dims)
    return _peak(memory.terms, forward_backward, memory.optimizer_temporary)


def _recomputed(model: torch.nn.Module, dtype: torch.dtype, dims: Mapping[str, Any]) -> Term | None:
    """The most a checkpointed block holds while backward runs it again (its activations
    beyond its input): blocks that say so with ``recomputed_activations(batch, seq, dtype)``
    (typedflops.nn's); None when none does."""
    found: list[tuple[int, sympy.Expr]] = []
    for sub in model.modules():
        method = getattr(sub, "recomputed_activations", None)
        if callable(method) and "batch" in dims and "seq" in dims:
            found.append(method(dims["batch"], dims["seq"], dtype))
    if not found:
        return None
    count, formula = max(found, key=lambda item: item[0])
    return Term(count, formula)


def measure_peak(step: Callable[[], Any], device: str | torch.device = "cpu") -> int:
    """Bytes allocated at the peak while ``step()`` runs on ``device``, above what was
    allocated when it started (tensors that already exist, such as parameters, are not
    counted).

    On a CUDA device, ``torch.cuda.max_memory_allocated``; on a CPU, the allocation events
    of ``torch.profiler`` with ``profile_memory=True`` (the running total of bytes the
    allocator handed out, at each allocation and free).

    >>> measure_peak(lambda: torch.ones(1024) + torch.ones(1024)) >= 3 * 4096
    True
    """
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - before)
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events: list[tuple[int, int, int]] = []
    results: Any = prof.profiler.kineto_results if prof.profiler is not None else None
    stack = list(results.experimental_event_tree()) if results is not None else []
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == _EventType.Allocation:
            fields = node.extra_fields
            events.append((node.start_time_ns, int(fields.alloc_size), int(fields.total_allocated)))
    if not events:
        return 0
    events.sort()
    # The running total counts from the first profiled allocation of the process: the
    # window's own peak is measured from the total just before its first event.
    start = events[0][2] - events[0][1]
    return max(0, max(total for _, _, total in events) - start)
