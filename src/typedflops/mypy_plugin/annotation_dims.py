"""The annotation check: ``Float[Tensor, "batch d_in"]`` gives ``Tensor`` its dims.

jaxtyping spells its dtypes as ``Annotated`` for static checkers, so mypy hands the plugin
``Annotated[Tensor, "batch d_in"]``. The dim string is parsed by the grammar core and kept,
as written, on the analysed type (``Instance.extra_attrs``), which survives mypy's cache and
the daemon and does not change subtyping. A dim string the core rejects attaches nothing:
that annotation is unchecked.
"""

from __future__ import annotations

from mypy.errorcodes import VALID_TYPE
from mypy.plugin import AnalyzeTypeContext
from mypy.typeanal import TypeAnalyser
from mypy.types import (
    AnyType,
    Instance,
    LiteralType,
    RawExpressionType,
    Type,
    TypeOfAny,
    UnboundType,
    get_proper_type,
)

from .static import parse_static
from .tensors import ANNOTATED, is_tensor

__all__ = ["JAXTYPING_DTYPES", "analyze_annotated"]

# jaxtyping spells these `Annotated` for static checkers (jaxtyping/_indirection.py).
JAXTYPING_DTYPES = frozenset(
    {
        "BFloat16",
        "Bool",
        "Complex",
        "Complex64",
        "Complex128",
        "Float",
        "Float8e4m3b11fnuz",
        "Float8e4m3fn",
        "Float8e4m3fnuz",
        "Float8e5m2",
        "Float8e5m2fnuz",
        "Float16",
        "Float32",
        "Float64",
        "Inexact",
        "Int",
        "Int2",
        "Int4",
        "Int8",
        "Int16",
        "Int32",
        "Int64",
        "Integer",
        "Key",
        "Num",
        "Real",
        "Shaped",
        "UInt",
        "UInt2",
        "UInt4",
        "UInt8",
        "UInt16",
        "UInt32",
        "UInt64",
    }
)


def analyze_annotated(ctx: AnalyzeTypeContext) -> Type:
    """``Annotated[...]``: mypy's own analysis, plus jaxtyping dims on torch tensors."""
    unbound, api = ctx.type, ctx.api
    if len(unbound.args) < 2:
        # The message and code of mypy's own check, which this hook replaces.
        api.fail(
            "Annotated[...] must have exactly one type argument and at least one annotation",
            ctx.context,
            code=VALID_TYPE,
        )
        return AnyType(TypeOfAny.from_error)
    if isinstance(api, TypeAnalyser):
        analyzed = api.anal_type(
            unbound.args[0], allow_typed_dict_special_forms=api.allow_typed_dict_special_forms
        )
    else:
        analyzed = api.analyze_type(unbound.args[0])
    if unbound.name.rpartition(".")[2] not in JAXTYPING_DTYPES or len(unbound.args) != 2:
        return analyzed
    dim_str = _raw_string(unbound.args[1])
    proper = get_proper_type(analyzed)
    if dim_str is None or parse_static(dim_str) is None or not is_tensor(proper):
        return analyzed
    assert isinstance(proper, Instance)
    literal = LiteralType(dim_str, api.named_type("builtins.str", []))
    return proper.copy_with_extra_attr(ANNOTATED, literal)


def _raw_string(arg: Type) -> str | None:
    if isinstance(arg, RawExpressionType) and isinstance(arg.literal_value, str):
        return arg.literal_value
    if isinstance(arg, UnboundType) and not arg.args:
        return arg.original_str_expr  # a one-word string parses as a type name
    return None
