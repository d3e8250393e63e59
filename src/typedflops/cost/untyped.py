"""``typedflops.estimate``: the cost of any model or function at named sizes, annotated or
not: its inputs' annotations given with the call (``Int[Tensor, "batch seq"]``), so that
a model nobody annotated (a Hugging Face or torchvision model) is costed in ``batch`` and
``seq`` without a wrapper."""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import numbers
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from ..contract.annotation import is_tensor_annotation, tensor_spec
from ..contract.function import CheckedFunction
from ..errors import SpecError
from .engine.dry_modules import has_lazy, initialize_lazy, lazy_on_meta, refuse_script
from .engine.probes import default_dtype, shape_at
from .model import estimate as estimate_checked
from .model import estimate_options
from .types import Cost

__all__ = ["estimate", "holds_annotations"]


def estimate(
    model: Callable[..., Any],
    /,
    *inputs: Any,
    dtype: torch.dtype | None = None,
    grad: Sequence[str] = (),
    **named: Any,
) -> Cost:
    """The cost of one call of ``model`` at the given sizes, from dry runs on meta tensors
    (nothing is allocated; formulas in the dims the annotations name).

    ``model`` is an ``nn.Module`` (its ``forward`` is called through the module, hooks
    included) or any function. Its inputs are given as jaxtyping annotations, positionally
    for its leading parameters (or its ``*args``: a wrapper's, ``torch.compile``'s module's,
    a builtin's such as ``torch.matmul``) or by parameter name: ``Int[Tensor, "batch seq"]``
    is built as a tensor of shape ``(batch, seq)`` and dtype int64 (``Float[...]``: float32
    or ``dtype``, or where the body fails on float32 the one floating dtype of a model
    moved to it, ``.double()``, ``.to(torch.bfloat16)``; ``Complex[...]``: complex64; a
    ``dtype`` that a floating annotation cannot take, ``Float[...]`` for ``complex64``, is a
    SpecError).
    Other values given for parameters are passed as they are (``use_cache=False``; a real
    tensor takes part through a meta copy), and so are values other than sizes for a
    ``forward`` that takes
    ``**kwargs`` (``output_hidden_states=True``). The remaining
    keywords are the dims' sizes: ints, or tuples for ``*name`` dims and ``ellipsis=``.
    An input that is a dict, list, tuple or dataclass of tensors is given as one of
    annotations (``batch={"ids": Int[Tensor, "b s"], "mask": Int[Tensor, "b s"]}``,
    ``Batch(ids=Int[Tensor, "b s"], mask=...)``), each tensor built in its place.
    ``grad`` names the inputs whose tensors require grad (a container: each tensor in it;
    one of them by its place, ``batch_mask``); the module's parameters follow their
    ``requires_grad``, so ``backward_flops`` is the backward of a training step (with the
    backward the body runs itself, ``loss.backward()`` or ``torch.autograd.grad``, as it
    ran).

    A ``@typed_flops`` function, or a module whose ``forward`` is one, needs no annotations:
    ``estimate(model, batch=8)`` is ``model.forward.estimate(batch=8)``. Missing, unknown or
    bad sizes, and inputs that are not annotations, raise :class:`SpecError`. Real tensors
    alone (``estimate(model, ids)``) cost that one call, with no dim to name: a formula
    that is a number.

    >>> import torch
    >>> from torch import Tensor, nn
    >>> from jaxtyping import Float, Int
    >>> from typedflops import estimate
    >>> mlp = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    >>> cost = estimate(mlp, Float[Tensor, "batch 64"], batch=32)
    >>> cost.matmul_flops == 2 * 32 * 64 * 256 * 2
    True
    >>> cost.formula.free_symbols == {cost.formula.free_symbols.pop()}  # one symbol: batch
    True
    >>> lm = nn.Sequential(nn.Embedding(1000, 64), nn.Linear(64, 1000, bias=False))
    >>> cost = estimate(lm, Int[Tensor, "batch seq"], batch=8, seq=128)
    >>> cost.formula
    128000*batch*seq
    >>> cost.backward_flops == 2 * cost.flops + 8 * 128 * 64  # weight grads, embedding's adds
    True
    """
    owner, call = _target(model)
    if owner is not None:
        model = owner
    grad = estimate_options(f"estimate({_label(model)})", dtype, grad)
    signature = _forward_signature(call, owner)
    names = list(signature.parameters)
    positional = _positional_names(signature)
    if any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values()):
        # ``forward(self, *args, **kwargs)`` (a wrapper, torch.compile's module): the inputs
        # past the named ones go to ``*args``, in order
        extra = range(len(positional), len(inputs))
        positional += [name for name in (f"_input{i}" for i in extra) if name not in names]
    arguments: dict[str, Any] = {}
    if len(inputs) > len(positional):
        raise SpecError.at(
            f"estimate({_label(model)})",
            f"{len(inputs)} inputs given, but its forward takes {len(positional)} positionally "
            f"({', '.join(positional) or 'none'})",
        )
    arguments.update(zip(positional, inputs, strict=False))
    hints = [hint for value in (*arguments.values(), *named.values()) for hint in _hints(value)]
    dim_names = {dim for hint in hints if is_tensor_annotation(hint) for dim in _dims_of(hint)}
    dims: dict[str, Any] = {}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    for key, value in named.items():
        if takes_any and key not in names and key not in dim_names and not _a_size(value):
            # a forward's **kwargs takes a flag or an object (output_hidden_states=True); an
            # int stays a size, so a dim nothing names is still refused
            arguments[key] = value
        elif key in names and (key not in dim_names or is_tensor_annotation(value)):
            if key in arguments:
                raise SpecError.at(
                    f"estimate({_label(model)})", f"{key} is given twice (by position and name)"
                )
            arguments[key] = value
        else:
            dims[key] = value
    for key, value in arguments.items():
        if isinstance(value, str) and not _takes_string(signature.parameters.get(key)):
            raise SpecError.at(
                f"estimate({_label(model)})",
                f"{key}={value!r} is a string; an input is given as an annotation",
                hint=f"write {key}=Float[Tensor, {value!r}] (or Int[...] for ids)",
            )
    checked = _checked(owner, call)
    # A dict, list, tuple or dataclass of annotations (``batch={"x": Float[...], ...}``) is
    # built leaf by leaf: each leaf is a tensor input of its own, named after its place
    # (``batch_x``), and the container is rebuilt around the tensors for the call.
    specs: dict[str, Any] = {}
    shapes: dict[str, Any] = {}
    for name, value in arguments.items():
        if is_tensor_annotation(value):
            specs[name] = value
        elif any(True for _ in _hints(value)):
            leaves: dict[str, Any] = {}
            taken = set(names) | set(arguments) | set(specs) | set(dims)
            shapes[name] = _slots(value, name, leaves, taken)
            specs.update(leaves)
            # grad= may name the container: every tensor in it requires grad
            grad = [g for item in grad for g in (leaves if item == name else (item,))]
    if not specs and not any(_real_tensors(value) for value in arguments.values()):
        # (real tensors take part through their meta copies)
        if checked is not None and not arguments:
            objects = (owner,) if owner is not None else ()
            return estimate_checked(checked, objects, dims, dtype, tuple(grad))
        raise SpecError.at(
            f"estimate({_label(model)})",
            "no input is annotated, so no tensor can be built",
            hint="give each tensor input as an annotation: "
            "estimate(model, Float[Tensor, 'batch d'], batch=...)",
        )
    wrapper = _wrapper(model, owner, positional, arguments, specs, shapes)
    if owner is not None and has_lazy(owner):
        built = _meta_inputs(specs, dims, dtype)
        if built is None:  # (its weights have no shapes yet: no dry run can read them)
            missing = sorted({d for hint in specs.values() for d in _dims_of(hint)} - set(dims))
            raise SpecError.at(
                f"estimate({_label(model)})",
                f"its lazy layers are initialized by a call at the sizes given, and "
                f"{', '.join(missing) or 'a size'} {'is' if len(missing) < 2 else 'are'} "
                "not given",
                hint=f"pass {', '.join(f'{m}=...' for m in missing) or 'every size'}",
            )
        initialize_lazy(_label(model), owner, wrapper.__wrapped__, built)
    objects = (owner,) if owner is not None else ()
    return estimate_checked(wrapper, objects, dims, dtype, tuple(grad))


def _meta_inputs(
    specs: Mapping[str, Any], dims: Mapping[str, Any], dtype: torch.dtype | None
) -> dict[str, torch.Tensor] | None:
    """The annotated inputs as meta tensors at the sizes given (None: a size is missing,
    which the estimate says)."""
    inputs: dict[str, torch.Tensor] = {}
    for name, hint in specs.items():
        spec = tensor_spec(hint)
        try:
            shape = shape_at(spec, dims)
        except (KeyError, TypeError, ValueError):
            return None
        inputs[name] = torch.empty(shape, dtype=default_dtype(spec, dtype), device="meta")
    return inputs


def _a_size(value: Any) -> bool:
    """An int (not a bool), or a tuple of them (the sizes ``...`` stands for)."""
    if isinstance(value, tuple):
        return all(_a_size(item) for item in value)
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _label(model: Any) -> str:
    if isinstance(model, torch.nn.Module):
        return type(model).__name__
    if isinstance(model, functools.partial):
        return f"partial({_label(model.func)})"  # never its arguments' values
    return str(getattr(model, "__qualname__", None) or getattr(model, "__name__", repr(model)))


def _target(model: Any) -> tuple[torch.nn.Module | None, Callable[..., Any]]:
    """The module (if any) and the function whose parameters the inputs fill."""
    if isinstance(model, torch.nn.Module):
        refuse_script(model)
        model = lazy_on_meta(model)  # (a lazy layer not initialized: see there)
        return model, type(model).forward
    if not callable(model):
        raise SpecError.at("estimate()", f"{model!r} is not a module or a function")
    return None, model


def _forward_signature(call: Callable[..., Any], owner: Any) -> inspect.Signature:
    try:
        signature = inspect.signature(call)
    except (TypeError, ValueError):
        # a builtin (torch.matmul) or a partial of one: its inputs go by position
        return inspect.Signature(
            [
                inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
            ]
        )
    if owner is not None:  # forward's self
        parameters = list(signature.parameters.values())[1:]
        signature = signature.replace(parameters=parameters)
    return signature


#: A string annotation that takes a string: ``str``, ``str | None``, ``Literal["a", "b"]``.
_STRING_ANNOTATION = re.compile(r"\bstr\b|\bLiteral\[")


def _takes_string(parameter: inspect.Parameter | None) -> bool:
    """Whether ``parameter`` takes a string (``mode: str = "train"``, a ``Literal`` of
    names): a string given for it is passed as it is, not taken for a dim string meant as
    an annotation (``input_ids="batch seq"``)."""
    if parameter is None:
        return False
    if isinstance(parameter.default, str):
        return True
    annotation = parameter.annotation
    if annotation is parameter.empty:
        return False
    if annotation is str:
        return True
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return _STRING_ANNOTATION.search(text) is not None


def _positional_names(signature: inspect.Signature) -> list[str]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [name for name, p in signature.parameters.items() if p.kind in kinds]


def _dims_of(hint: Any) -> set[str]:
    spec = tensor_spec(hint)
    return set(spec.names) | set(spec.variadic_names)


def _checked(owner: Any, call: Any) -> CheckedFunction[..., Any] | None:
    found = getattr(call, "__func__", call)
    return found if isinstance(found, CheckedFunction) else None


def _wrapper(
    model: Callable[..., Any],
    owner: torch.nn.Module | None,
    positional: list[str],
    arguments: Mapping[str, Any],
    specs: Mapping[str, Any],
    shapes: Mapping[str, Any],
) -> CheckedFunction[..., Any]:
    """A checked function whose tensor parameters are the annotated inputs and whose body
    calls the model with them (in their places, containers of them rebuilt from
    ``shapes``) and with the other arguments given."""
    fixed = {
        name: value for name, value in arguments.items() if name not in specs and name not in shapes
    }
    order = [name for name in positional if name in arguments]
    # Inputs up to the last one given by position go by position; the rest by name.
    by_position = order[: _last_leading(positional, arguments)]

    def call(*args: Any, **kwargs: Any) -> Any:
        target = args[0] if owner is not None else model
        built = {name: _fill(shape, kwargs) for name, shape in shapes.items()}
        values = {**fixed, **{k: v for k, v in kwargs.items() if k in arguments}, **built}
        leading = [values.pop(name) for name in by_position]
        return target(*leading, **values)

    kind = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter(name, kind, annotation=hint) for name, hint in specs.items()]
    if owner is not None:
        parameters.insert(0, inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY))
    call.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    call.__annotations__ = dict(specs)
    label = _label(model)
    call.__name__ = call.__qualname__ = label
    with warnings.catch_warnings():  # (real tensors alone: no annotation, nothing to check)
        warnings.simplefilter("ignore", UserWarning)
        return CheckedFunction(call, flops=None, name=label)


@dataclasses.dataclass(frozen=True)
class _Slot:
    """The place of one annotated tensor in a container of inputs."""

    name: str


@dataclasses.dataclass(frozen=True)
class _Container:
    """A dict, list or tuple of inputs (a subclass too: a namedtuple, an OrderedDict), or
    a dataclass instance (``template``, its fields by name in ``items``), its items with a
    :class:`_Slot` for each annotated tensor."""

    kind: type
    items: dict[Any, Any] | list[Any]
    template: Any = None


def _a_dataclass(value: Any) -> bool:
    """Whether ``value`` is a dataclass instance (not a dataclass itself)."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _fields(value: Any) -> dict[str, Any]:
    """A dataclass instance's fields by name."""
    return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}


def _real_tensors(value: Any, depth: int = 6) -> bool:
    """Whether ``value`` holds a tensor: itself, or in its dicts, lists, tuples and
    dataclass fields, ``depth`` containers deep."""
    if isinstance(value, torch.Tensor):
        return True
    if not depth:
        return False
    if _a_dataclass(value):
        value = _fields(value)
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return any(_real_tensors(item, depth - 1) for item in value)
    return False


def holds_annotations(value: Any) -> bool:
    """Whether ``value`` is a dict, list, tuple or dataclass holding tensor annotations
    (an input :func:`estimate` builds in place)."""
    return not is_tensor_annotation(value) and any(True for _ in _hints(value))


def _hints(value: Any) -> Iterator[Any]:
    """The tensor annotations in ``value``: itself, or those in a dict, list, tuple or
    dataclass of them (nested)."""
    if is_tensor_annotation(value):
        yield value
    elif _a_dataclass(value):
        for item in _fields(value).values():
            yield from _hints(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _hints(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _hints(item)


def _slots(value: Any, name: str, leaves: dict[str, Any], taken: set[str]) -> Any:
    """``value`` with each annotation in it put in ``leaves`` under a name made from its
    place (``batch_x``, ``xs_0``; a free identifier) and replaced by its :class:`_Slot`."""
    if is_tensor_annotation(value):
        leaf = re.sub(r"\W", "_", name)
        while leaf in taken or leaf in leaves or not leaf.isidentifier():
            leaf = f"_{leaf}"
        leaves[leaf] = value
        return _Slot(leaf)
    if _a_dataclass(value):
        fields = {k: _slots(v, f"{name}_{k}", leaves, taken) for k, v in _fields(value).items()}
        return _Container(type(value), fields, value)
    if isinstance(value, Mapping):
        items = {k: _slots(v, f"{name}_{k}", leaves, taken) for k, v in value.items()}
        return _Container(type(value), items)
    if isinstance(value, (list, tuple)):
        seq = [_slots(v, f"{name}_{i}", leaves, taken) for i, v in enumerate(value)]
        return _Container(type(value), seq)
    return value


def _fill(shape: Any, tensors: Mapping[str, Any]) -> Any:
    """The value ``shape`` stands for, with each slot's tensor in its place."""
    if isinstance(shape, _Slot):
        return tensors[shape.name]
    if not isinstance(shape, _Container):
        return shape
    if shape.template is not None and isinstance(shape.items, dict):
        built = copy.copy(shape.template)  # (a dataclass: a copy with each field filled)
        for name, item in shape.items.items():
            object.__setattr__(built, name, _fill(item, tensors))
        return built
    if isinstance(shape.items, dict):
        return shape.kind({k: _fill(v, tensors) for k, v in shape.items.items()})
    filled = [_fill(v, tensors) for v in shape.items]
    return shape.kind(*filled) if hasattr(shape.kind, "_fields") else shape.kind(filled)


def _last_leading(positional: list[str], arguments: Mapping[str, Any]) -> int:
    """How many of the leading positional parameters are all given (these go by position,
    so a forward that takes ``*args`` after them gets them in order)."""
    count = 0
    for name in positional:
        if name not in arguments:
            break
        count += 1
    return count
