"""The annotation check: ``Float[Tensor, "batch d_in"]`` gives ``Tensor`` its dims.

jaxtyping spells its dtypes as ``Annotated`` for static checkers, so mypy hands the plugin
``Annotated[Tensor, "batch d_in"]``, under whatever name the module imported the dtype as
(``from jaxtyping import Float as F``, ``jaxtyping.Float``, a module re-exporting it);
aliases of a whole annotation (``Images: TypeAlias = Float[Tensor, "b c h w"]``) and of
the array type (``Tensor = torch.Tensor``) are expanded by mypy before this runs. The dim
string is kept, as written, on the analysed type (:func:`.tensors.with_annotation`); one
the grammar core rejects is kept too, so that unions compare as they should, but is never
read as dims.

An object standing in for a dtype (alphafold3-pytorch's ``Float = TorchTyping(Float)``,
used as ``Float['b n d']``) is not a type to mypy, which reports it as plain mypy does;
the plugin adds one note per module (``unread-annotation``) saying that the dims of those
annotations are not checked.

Here too, once per function: ``return x`` where ``x`` is still the parameter it was
called with, annotated with dims that differ from the return annotation.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.errorcodes import VALID_TYPE
from mypy.nodes import (
    ARG_NAMED,
    ARG_NAMED_OPT,
    ARG_OPT,
    ARG_POS,
    AssignmentStmt,
    Context,
    Expression,
    FuncDef,
    ImportFrom,
    IndexExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    RefExpr,
    StrExpr,
    TupleExpr,
    TypeAlias,
)
from mypy.plugin import AnalyzeTypeContext
from mypy.semanal import SemanticAnalyzer
from mypy.typeanal import TypeAnalyser
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    RawExpressionType,
    Type,
    TypeOfAny,
    UnboundType,
    get_proper_type,
)
from mypy.util import correct_relative_import

from . import codes
from .flow import Assigned, Binding, Flow, Parameter, flow_of
from .shapes import check_produced
from .static import Dims, bindable_names, format_dims, parse_static
from .tensors import ANNOTATED as ANNOTATED_ATTRIBUTE
from .tensors import is_tensor, with_annotation, without_free_names

__all__ = [
    "ANNOTATED",
    "ARRAY_TYPES",
    "JAXTYPING_DTYPES",
    "alias_payload",
    "alias_use",
    "aliases_a_tensor",
    "analyze_annotated",
    "array_in_alias",
    "delegating",
    "jaxtyping_dtype",
    "mypy_analysis",
    "raw_string",
    "unreadable_alias",
]

ANNOTATED = frozenset({"typing.Annotated", "typing_extensions.Annotated"})
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
    semantic = _semantic_analyzer(api)
    module = semantic.cur_mod_node if semantic else None
    if len(unbound.args) < 2:
        dtype = jaxtyping_dtype(unbound.name, module, semantic)
        if dtype is not None and semantic is not None and isinstance(api, TypeAnalyser):
            _note_once(api, semantic, ctx.context, dtype)
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
    dtype = jaxtyping_dtype(unbound.name, module, semantic)
    if dtype is None or len(unbound.args) != 2:
        return analyzed
    dim_str = raw_string(unbound.args[1])
    proper = get_proper_type(analyzed)
    if dim_str is None or not isinstance(proper, Instance) or not is_tensor(proper):
        return analyzed
    object_type = api.named_type("builtins.object", [])
    annotated = with_annotation(proper, dim_str, dtype, object_type)
    if semantic is not None and isinstance(api, TypeAnalyser):
        _check_returned_parameters(semantic, api, unbound, dim_str)
    return annotated


def raw_string(arg: Type) -> str | None:
    """The string a type argument spells (``"b n"``), or None."""
    if isinstance(arg, RawExpressionType) and isinstance(arg.literal_value, str):
        return arg.literal_value
    if isinstance(arg, UnboundType) and not arg.args:
        return arg.original_str_expr  # a one-word string parses as a type name
    return None


def _semantic_analyzer(api: object) -> SemanticAnalyzer | None:
    inner = api.api if isinstance(api, TypeAnalyser) else None
    return inner if isinstance(inner, SemanticAnalyzer) else None


def jaxtyping_dtype(
    name: str, module: MypyFile | None, semantic: SemanticAnalyzer | None, depth: int = 0
) -> str | None:
    """The jaxtyping dtype an ``Annotated`` written as ``name`` stands for, or None for
    typing's own ``Annotated``: the name itself, or what a ``from ... import X as name``
    in ``module`` (followed through re-exporting modules) renamed."""
    first, _, rest = name.partition(".")
    last = name.rpartition(".")[2]
    if rest:
        return last if last in JAXTYPING_DTYPES else None
    if module is None or depth > 4:
        return first if first in JAXTYPING_DTYPES else None
    for imported in module.imports:
        if not isinstance(imported, ImportFrom):
            continue
        for original, alias in imported.names:
            if (alias or original) != first:
                continue
            source, _ = correct_relative_import(
                module.fullname, imported.relative, imported.id, module.is_package_init_file()
            )
            if source.split(".")[0] == "jaxtyping":
                return original if original in JAXTYPING_DTYPES else None
            if source == "typing" or source == "typing_extensions":
                return None  # typing's own Annotated
            origin = semantic.modules.get(source) if semantic is not None else None
            found = jaxtyping_dtype(original, origin, semantic, depth + 1)
            if found is not None or origin is not None:
                return found
    return first if first in JAXTYPING_DTYPES else None


# -- `return x` where x is the parameter ----------------------------------------------------

_CHECKED: dict[int, FuncDef] = {}


def _check_returned_parameters(
    semantic: SemanticAnalyzer, api: TypeAnalyser, returned: UnboundType, dim_str: str
) -> None:
    """``return x`` of a parameter annotated with other dims than the function returns."""
    function = semantic.statement
    signature = function.unanalyzed_type if isinstance(function, FuncDef) else None
    if not isinstance(function, FuncDef) or not isinstance(signature, CallableType):
        return
    current = function.type
    if not isinstance(current, CallableType) or current.ret_type is not returned:
        return  # not this function's return annotation
    if _CHECKED.get(id(function)) is function:
        return
    if len(_CHECKED) > 20_000:
        _CHECKED.clear()
    _CHECKED[id(function)] = function
    returned_dims = parse_static(dim_str)
    array = returned.args[0]
    if returned_dims is None or not isinstance(array, UnboundType):
        return
    if len(function.arguments) != len(signature.arg_types):
        return
    parameters: dict[int, Dims] = {}
    for index, (argument, typ) in enumerate(
        zip(function.arguments, signature.arg_types, strict=True)
    ):
        dims = _parameter_dims(typ, array.name, semantic)
        if dims is not None and argument.kind in (ARG_POS, ARG_OPT, ARG_NAMED, ARG_NAMED_OPT):
            parameters[index] = dims
    bound = frozenset(name for dims in parameters.values() for name in _names(dims))
    free = without_free_names(returned_dims, bound)
    flow = flow_of(function)
    for statement, returned_binding in flow.returned_names:
        binding = _through_names(flow, returned_binding)
        if not isinstance(binding, Parameter) or binding.index not in parameters:
            continue
        dims = parameters[binding.index]
        finding = check_produced(dims, free)
        if finding is None:
            continue
        value = statement.expr
        name = value.name if isinstance(value, NameExpr) else "a parameter"
        message = (
            f'{function.name}() returns {name}, "{format_dims(dims)}", but is annotated'
            f' "{dim_str}": {finding.message}'
        )
        code = codes.SHAPE if finding.severity == "shape" else codes.DIM_ALIAS
        api.fail(message, statement, code=code)


def _through_names(flow: Flow, binding: Binding | None) -> Binding | None:
    """The binding ``y`` stands for after ``y = x`` (followed a few names deep)."""
    for _ in range(8):
        if not isinstance(binding, Assigned) or binding.item is not None:
            return binding
        value = binding.statement.rvalue
        if not isinstance(value, NameExpr):
            return binding
        binding = flow.binding(value)
    return None


def _parameter_dims(typ: Type, array: str, semantic: SemanticAnalyzer) -> Dims | None:
    """The dims of an unanalysed parameter annotation ``Dtype[array, "dims"]``."""
    if not isinstance(typ, UnboundType) or len(typ.args) != 2:
        return None
    first = typ.args[0]
    if not isinstance(first, UnboundType) or first.name != array:
        return None
    symbol = semantic.lookup_qualified(typ.name, typ, suppress_errors=True)
    if symbol is None or symbol.fullname not in ANNOTATED:
        return None
    if jaxtyping_dtype(typ.name, semantic.cur_mod_node, semantic) is None:
        return None
    text = raw_string(typ.args[1])
    return parse_static(text) if text is not None else None


def _names(dims: Dims) -> frozenset[str]:
    return bindable_names(format_dims(dims))


# -- aliases of a whole annotation ------------------------------------------------------------

#: The array types an alias such as ``Images: TypeAlias = Float[Tensor, "b c h w"]`` names.
ARRAY_TYPES = frozenset({"torch._tensor.Tensor", "torch.nn.parameter.Parameter"})


def array_in_alias(fullname: str) -> Callable[[AnalyzeTypeContext], Type]:
    """The hook for ``Tensor`` as mypy analyses it: mypy's own analysis, plus the dims of
    the annotation when ``Tensor`` is what an alias of a jaxtyping annotation names.

    mypy reads an alias's value as an expression and drops ``Annotated``'s metadata before
    any type hook runs, so the dim string is read from the statement being analysed.
    """

    def hook(ctx: AnalyzeTypeContext) -> Type:
        _DELEGATING.add(fullname)
        try:
            analyzed = ctx.api.analyze_type(ctx.type)
        finally:
            _DELEGATING.discard(fullname)
        semantic = _semantic_analyzer(ctx.api)
        statement = semantic.statement if semantic is not None else None
        if semantic is None or not isinstance(statement, AssignmentStmt):
            return analyzed
        found = _aliased_annotation(statement.rvalue, ctx.type, semantic)
        proper = get_proper_type(analyzed)
        if found is None or not isinstance(proper, Instance) or not is_tensor(proper):
            return analyzed
        dtype, dim_str = found
        return with_annotation(proper, dim_str, dtype, ctx.api.named_type("builtins.object", []))

    return hook


def _aliased_annotation(
    value: Expression, array: UnboundType, semantic: SemanticAnalyzer
) -> tuple[str, str] | None:
    """(dtype, dim string) when ``value`` is ``Dtype[<array>, "dims"]`` and ``array`` is the
    type being analysed (the same place in the source)."""
    if not isinstance(value, IndexExpr) or not isinstance(value.base, RefExpr):
        return None
    index = value.index
    if not isinstance(index, TupleExpr) or len(index.items) != 2:
        return None
    first, second = index.items
    if (first.line, first.column) != (array.line, array.column) or not isinstance(second, StrExpr):
        return None
    name = _dotted(value.base)
    symbol = semantic.lookup_qualified(name, value, suppress_errors=True) if name else None
    if name is None or symbol is None or symbol.fullname not in ANNOTATED:
        return None
    dtype = jaxtyping_dtype(name, semantic.cur_mod_node, semantic)
    return (dtype, second.value) if dtype is not None else None


def _dotted(expr: Expression) -> str | None:
    if isinstance(expr, NameExpr):
        return expr.name
    if isinstance(expr, MemberExpr):
        base = _dotted(expr.expr)
        return f"{base}.{expr.name}" if base else None
    return None


def alias_use(fullname: str, payload: Type) -> Callable[[AnalyzeTypeContext], Type]:
    """The hook for a use of such an alias: mypy expands an alias of a bare class into a
    new instance (dropping what the alias's value carried), so the dims go back on it."""

    def hook(ctx: AnalyzeTypeContext) -> Type:
        _DELEGATING.add(fullname)
        try:
            analyzed = ctx.api.analyze_type(ctx.type)
        finally:
            _DELEGATING.discard(fullname)
        if isinstance(analyzed, Instance) and analyzed.extra_attrs is None and is_tensor(analyzed):
            return analyzed.copy_with_extra_attr(ANNOTATED_ATTRIBUTE, payload)
        return analyzed

    return hook


def aliases_a_tensor(node: object) -> bool:
    """Whether ``node`` is an alias of the tensor type itself (``Tensor = torch.Tensor``)."""
    if not isinstance(node, TypeAlias):
        return False
    target = get_proper_type(node.target)
    return isinstance(target, Instance) and target.extra_attrs is None and is_tensor(target)


def alias_payload(node: object) -> Type | None:
    """What an alias of a jaxtyping annotation carries (None for any other node)."""
    if not isinstance(node, TypeAlias):
        return None
    target = get_proper_type(node.target)
    if not isinstance(target, Instance) or target.extra_attrs is None:
        return None
    return target.extra_attrs.attrs.get(ANNOTATED_ATTRIBUTE)


# -- objects standing in for a dtype ---------------------------------------------------------

_DELEGATING: set[str] = set()
_NOTED: dict[int, MypyFile] = {}


def delegating(fullname: str) -> bool:
    """Whether mypy's own analysis of ``fullname`` is running under :func:`unreadable_alias`."""
    return fullname in _DELEGATING


def _note_once(api: TypeAnalyser, semantic: SemanticAnalyzer, context: Context, name: str) -> None:
    """One note per module: annotations written with a stand-in for a dtype are not read."""
    module = semantic.cur_mod_node
    if _NOTED.get(id(module)) is module:
        return
    if len(_NOTED) > 20_000:
        _NOTED.clear()
    _NOTED[id(module)] = module
    message = (
        f"{name}[...] here is not jaxtyping's {name}[array, dims] (an object standing in for"
        " it, such as TorchTyping(Float), is not a type to mypy): typedflops does not check"
        " the dims of annotations written this way in this module"
    )
    api.note(message, context, code=codes.UNREAD_ANNOTATION)


def mypy_analysis(fullname: str) -> Callable[[AnalyzeTypeContext], Type]:
    """What mypy makes of a type without this plugin's hook for ``fullname``."""

    def analysis(ctx: AnalyzeTypeContext) -> Type:
        if fullname in ANNOTATED:  # mypy reads Annotated[T, ...] as T
            args = ctx.type.args
            return ctx.api.analyze_type(args[0]) if args else AnyType(TypeOfAny.from_error)
        _DELEGATING.add(fullname)
        try:
            return ctx.api.analyze_type(ctx.type)
        finally:
            _DELEGATING.discard(fullname)

    return analysis


def unreadable_alias(fullname: str) -> Callable[[AnalyzeTypeContext], Type]:
    """The hook for a variable named like a dtype used as one (``Float['b n d']``): one
    note per module, then mypy's own analysis, unchanged (plain mypy's error included)."""

    def hook(ctx: AnalyzeTypeContext) -> Type:
        semantic = _semantic_analyzer(ctx.api)
        if semantic is not None and isinstance(ctx.api, TypeAnalyser):
            _note_once(ctx.api, semantic, ctx.context, fullname.rpartition(".")[2])
        _DELEGATING.add(fullname)
        try:
            return ctx.api.analyze_type(ctx.type)
        finally:
            _DELEGATING.discard(fullname)

    return hook
