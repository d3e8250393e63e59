"""The :class:`TypedFlopsPlugin` class: which hook answers which fullname."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from mypy.plugin import (
    AnalyzeTypeContext,
    FunctionContext,
    MethodContext,
    MethodSigContext,
    Plugin,
    ReportConfigContext,
)
from mypy.types import FunctionLike, Type

from . import hooks

OPS = ("einsum", "rearrange", "reduce", "repeat")
# Where the wrapped ops live: einops itself (with or without our stubs) and typedflops.
OP_MODULES = ("einops", "einops.einops", "typedflops", "typedflops.ops")
DECORATORS = frozenset({"typedflops.typed_flops", "typedflops.decorator.typed_flops"})
# Calls the plugin never needs to look at: saves a hook call per library call.
SKIPPED_PREFIXES = ("builtins.", "torch.", "typing.", "numpy.", "einops.", "jaxtyping.")


def _source_digest() -> str:
    """A digest of the plugin's own sources: mypy's cache is invalidated when they change."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


SOURCE_DIGEST = _source_digest()


def _op_hook(fullname: str) -> Callable[[FunctionContext], Type] | None:
    module, _, name = fullname.rpartition(".")
    if module not in OP_MODULES or name not in OPS:
        return None
    return hooks.einsum_hook if name == "einsum" else hooks.transform_hook(name)


class TypedFlopsPlugin(Plugin):
    """Reads jaxtyping dims and einops patterns; see :mod:`typedflops.mypy_plugin`."""

    def report_config_data(self, ctx: ReportConfigContext) -> str:
        return SOURCE_DIGEST

    def get_type_analyze_hook(self, fullname: str) -> Callable[[AnalyzeTypeContext], Type] | None:
        if fullname in ("typing.Annotated", "typing_extensions.Annotated"):
            return hooks.analyze_annotated
        return None

    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        op_hook = _op_hook(fullname)
        if op_hook is not None:
            return op_hook
        if fullname in DECORATORS:
            return hooks.typed_flops_hook
        if fullname.startswith(SKIPPED_PREFIXES):
            return None
        return hooks.user_function_hook

    def get_method_signature_hook(
        self, fullname: str
    ) -> Callable[[MethodSigContext], FunctionLike] | None:
        if fullname.endswith(".__call__") and not fullname.startswith(SKIPPED_PREFIXES):
            return hooks.module_call_signature
        return None

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        if fullname.startswith(SKIPPED_PREFIXES):
            return None
        return hooks.method_hook(fullname.rpartition(".")[2])
