"""The :class:`TypedFlopsPlugin` class: which check answers which call.

A hook is returned only for calls the plugin checks: the einops ops (einops' own and
typedflops'), ``@typed_flops(flops=...)``, and calls of functions, methods and modules whose
signatures carry jaxtyping dims. Every other call gets None, so mypy's default hooks
(``functools.partial`` and the rest) and other plugins still answer it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mypy.nodes import TypeInfo, Var
from mypy.options import Options
from mypy.plugin import (
    AnalyzeTypeContext,
    AttributeContext,
    FunctionContext,
    MethodContext,
    MethodSigContext,
    Plugin,
    ReportConfigContext,
)
from mypy.types import FunctionLike, Type

from . import annotation_dims, calls, einops_ops, flops, tensor_joins, tensor_methods, torch_einsum
from .guard import debugging, guarded
from .settings import read_settings

TRANSFORMS = ("rearrange", "reduce", "repeat")
# Where the wrapped ops live: einops itself (with or without typedflops' stubs) and typedflops.
OP_MODULES = ("einops", "einops.einops", "einops.packing", "typedflops", "typedflops.einops.ops")
DECORATORS = frozenset({"typedflops.typed_flops", "typedflops.decorator.typed_flops"})
TYPED_FUNCTION_CALL = "typedflops.decorator.TypedFunction.__call__"
TORCH_EINSUM = frozenset({"torch.functional.einsum", "torch.einsum"})
# Libraries whose functions never carry the user's dims: no look-up needed.
SKIPPED_PREFIXES = (
    "builtins.",
    "torch.",
    "typing.",
    "typing_extensions.",
    "numpy.",
    "einops.",
    "jaxtyping.",
    "functools.",
    "collections.",
    "_",
)


def _source_digest() -> str:
    """A digest of the plugin's and the grammar core's sources: mypy's cache is invalidated
    when they change."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for path in sorted([*here.glob("*.py"), *(here.parent / "syntax").glob("*.py")]):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


SOURCE_DIGEST = _source_digest()


LAYERS = ("Rearrange", "Reduce")


def _fixed_function_hooks() -> dict[str, Callable[[FunctionContext], Type]]:
    """The hooks of functions known by name: einops' ops (with or without typedflops'
    stubs) and typedflops', einops' layers, ``@typed_flops``, ``torch.einsum``."""
    hooks: dict[str, Callable[[FunctionContext], Type]] = {}
    for module in OP_MODULES:
        hooks[f"{module}.einsum"] = einops_ops.einsum_hook
        for name in TRANSFORMS:
            hooks[f"{module}.{name}"] = einops_ops.transform_hook(name, module)
        if module.startswith("einops"):
            hooks[f"{module}.pack"] = einops_ops.pack_hook
            hooks[f"{module}.unpack"] = einops_ops.unpack_hook
    for layer in LAYERS:
        hooks[f"einops.layers.torch.{layer}"] = einops_ops.layer_hook(layer)
    for name in DECORATORS:
        hooks[name] = flops.typed_flops_hook
    for name in TORCH_EINSUM:
        hooks[name] = torch_einsum.torch_einsum_hook
    hooks.update(tensor_methods.FUNCTION_HOOKS)
    hooks.update(tensor_joins.FUNCTION_HOOKS)
    return {name: guarded(hook, _default_return) for name, hook in hooks.items()}


class TypedFlopsPlugin(Plugin):
    """Reads jaxtyping dims and einops patterns; see :mod:`typedflops.mypy_plugin`."""

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.settings = read_settings(options.config_file)
        self._function_hooks = _fixed_function_hooks()
        self._method_hooks: dict[str, Callable[[MethodContext], Type]] = {
            name: guarded(hook, _default_return)
            for name, hook in {**tensor_methods.METHOD_HOOKS, **tensor_joins.METHOD_HOOKS}.items()
        }
        self._attribute_hooks: dict[str, Callable[[AttributeContext], Type]] = {
            name: guarded(hook, _default_attribute)
            for name, hook in tensor_methods.ATTRIBUTE_HOOKS.items()
        }
        self._type_hooks: dict[str, Callable[[AnalyzeTypeContext], Type]] = {
            name: guarded(annotation_dims.analyze_annotated, annotation_dims.mypy_analysis(name))
            for name in annotation_dims.ANNOTATED
        }
        for name in annotation_dims.ARRAY_TYPES:
            hook = annotation_dims.array_in_alias(name)
            self._type_hooks[name] = guarded(hook, annotation_dims.mypy_analysis(name))

    def report_config_data(self, ctx: ReportConfigContext) -> str:
        return f"{SOURCE_DIGEST}:{self.settings.typed_module_calls}"

    def _owner(self, fullname: str) -> tuple[TypeInfo, str] | None:
        owner, _, member = fullname.rpartition(".")
        symbol = self.lookup_fully_qualified(owner) if "." in owner else None
        if symbol is None or not isinstance(symbol.node, TypeInfo):
            return None
        return symbol.node, member

    def _find_type_analyze_hook(self, fullname: str) -> Callable[[AnalyzeTypeContext], Type] | None:
        # The user's names: an alias of a jaxtyping annotation, an alias of the tensor type
        # (`Tensor = torch.Tensor`, which an alias of an annotation may name), or a stand-in
        # for a dtype.
        symbol = self.lookup_fully_qualified(fullname)
        node = symbol.node if symbol is not None else None
        payload = annotation_dims.alias_payload(node)
        if payload is not None:
            return annotation_dims.alias_use(fullname, payload)
        if annotation_dims.aliases_a_tensor(node):
            return annotation_dims.array_in_alias(fullname)
        if (
            isinstance(node, Var)
            and fullname.rpartition(".")[2] in annotation_dims.JAXTYPING_DTYPES
        ):
            return annotation_dims.unreadable_alias(fullname)
        return None

    def _find_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        if "." not in fullname:
            # A function defined inside another one: mypy names it without its module, so
            # it cannot be looked up here; the hook reads the callee itself.
            return calls.user_function_hook
        symbol = self.lookup_fully_qualified(fullname)
        if symbol is not None and calls.function_has_dims(symbol.node):
            return calls.user_function_hook
        return None

    def _find_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        if fullname == TYPED_FUNCTION_CALL:
            return calls.method_hook("__call__")
        found = self._owner(fullname)
        if found is not None and calls.method_has_dims(*found):
            return calls.method_hook(found[1])
        return None

    def _find_method_signature_hook(
        self, fullname: str
    ) -> Callable[[MethodSigContext], FunctionLike] | None:
        if not self.settings.typed_module_calls or not fullname.endswith(".__call__"):
            return None
        found = self._owner(fullname)
        if found is not None and calls.forward_of(found[0]) is not None:
            return calls.module_call_signature
        return None

    # -- what mypy calls: each hook guarded, a failing look-up is no hook -----------------

    # mypy asks for every name it meets (each annotation, each call): libraries' names are
    # answered first, without a look-up.

    def get_type_analyze_hook(self, fullname: str) -> Callable[[AnalyzeTypeContext], Type] | None:
        fixed = self._type_hooks.get(fullname)
        if fixed is not None:
            return None if annotation_dims.delegating(fullname) else fixed
        if fullname.startswith(SKIPPED_PREFIXES) or annotation_dims.delegating(fullname):
            return None
        hook = _lookup(self._find_type_analyze_hook, fullname)
        return guarded(hook, annotation_dims.mypy_analysis(fullname)) if hook else None

    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        fixed = self._function_hooks.get(fullname)
        if fixed is not None or fullname.startswith(SKIPPED_PREFIXES):
            return fixed
        hook = _lookup(self._find_function_hook, fullname)
        return guarded(hook, _default_return) if hook else None

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        fixed = self._method_hooks.get(fullname)
        if fixed is not None or fullname.startswith(SKIPPED_PREFIXES):
            return fixed
        hook = _lookup(self._find_method_hook, fullname)
        return guarded(hook, _default_return) if hook else None

    def get_attribute_hook(self, fullname: str) -> Callable[[AttributeContext], Type] | None:
        return self._attribute_hooks.get(fullname)

    def get_method_signature_hook(
        self, fullname: str
    ) -> Callable[[MethodSigContext], FunctionLike] | None:
        if fullname.startswith(SKIPPED_PREFIXES):
            return None
        hook = _lookup(self._find_method_signature_hook, fullname)
        return guarded(hook, _default_signature) if hook else None


Found = TypeVar("Found")


def _lookup(find: Callable[[str], Found | None], fullname: str) -> Found | None:
    try:
        return find(fullname)
    except Exception:
        if debugging():
            raise
        return None


def _default_return(ctx: FunctionContext | MethodContext) -> Type:
    return ctx.default_return_type


def _default_attribute(ctx: AttributeContext) -> Type:
    return ctx.default_attr_type


def _default_signature(ctx: MethodSigContext) -> FunctionLike:
    return ctx.default_signature
