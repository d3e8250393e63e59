"""``install_import_hook``: check whole packages with ``@typed_flops`` without editing them.

While the hook is installed, a module imported from one of the named packages is compiled
from an edited syntax tree: every function and method whose signature has an annotation
gets the decorator ``@typed_flops``, placed *innermost* (last in its decorator list, so
applied first, to the plain function). At definition time that decorator keeps only the
functions whose resolved hints contain a jaxtyping tensor annotation (``Float[Tensor,
"..."]``, also inside ``list[...]``, ``X | None`` or a type alias); it returns the others
unchanged.

Innermost placement is what makes the hook order-safe: ``@property``, ``@staticmethod``,
``@classmethod``, ``@torch.no_grad()`` and ``functools.wraps``-based decorators all receive
the checked function and wrap it as they would wrap the plain one. The hook never
evaluates generated source: the decorator is inserted as syntax-tree nodes and the tree
is compiled with ``compile`` (as jaxtyping's and typeguard's import hooks do).

A ``@dataclass`` gets the decorator *outermost*: when one of its fields has a tensor
annotation, its ``__init__`` checks the fields (see
:func:`typedflops.contract.classes.typed_class`).

What is left alone:

- functions (and classes) decorated with ``@typing.no_type_check``;
- functions already decorated with ``@typed_flops`` (their options, such as ``flops=``, stay);
- ``@typing.overload`` stubs;
- functions defined inside other functions (checking them would compile a contract on
  every call of the enclosing function) and the methods of classes defined there;
- modules imported before the hook was installed: they are not re-imported. Install the
  hook before the first import of the package (``pytest --typedflops=pkg`` does that
  before conftest files are loaded).

Instrumented modules are compiled from source on every import; their bytecode is not
cached, so a plain import of the same module never picks up the checked version.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.abc
import importlib.machinery
import sys
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Sequence
from importlib.util import decode_source
from typing import Any, TypeVar

import torch

from ..contract.annotation import is_tensor_annotation
from ..contract.classes import has_tensor_fields, typed_class
from ..decorator import TypedFunction, typed_flops
from ..errors import SpecError

__all__ = ["ImportHook", "install_import_hook"]

F = TypeVar("F", bound=Callable[..., Any])

# The name the edited module binds the instrumenting decorator to (a dunder, so it is
# neither exported by `from module import *` nor likely to clash with a user's name).
_DECORATOR_NAME = "__typedflops_instrument__"
_SKIP_DECORATORS = {"no_type_check", "typed_flops", "overload"}


def _contains_tensor_annotation(hint: Any) -> bool:
    """Whether ``hint`` is, or contains, a jaxtyping annotation of torch tensors.

    Annotations of other array types (``Float[np.ndarray, "n"]``) are not ours to check.
    """
    if is_tensor_annotation(hint):
        array_type = hint.array_type
        return array_type is Any or (
            isinstance(array_type, type) and issubclass(array_type, torch.Tensor)
        )
    return any(_contains_tensor_annotation(arg) for arg in typing.get_args(hint))


def instrument(fn: F, *, jaxtyping_syntax: bool) -> F:
    """Decorate ``fn`` with ``@typed_flops`` if one of its hints is a jaxtyping annotation.

    The import hook inserts this decorator; ``jaxtyping_syntax`` says whether the
    annotations name jaxtyping in the source, and decides when a hint cannot be resolved
    yet (a forward reference to a class defined later).

    >>> import torch
    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> def double(x: Float[Tensor, "n"]) -> Float[Tensor, "n"]:
    ...     return 2 * x
    >>> def add(a: int, b: int) -> int:
    ...     return a + b
    >>> type(instrument(double, jaxtyping_syntax=True)).__name__
    'TypedFunction'
    >>> instrument(add, jaxtyping_syntax=False) is add
    True
    """
    if isinstance(fn, TypedFunction) or getattr(fn, "__no_type_check__", False):
        return fn
    if isinstance(fn, type):
        if not dataclasses.is_dataclass(fn):
            return fn
        found = has_tensor_fields(fn)
        checked = found or (found is None and jaxtyping_syntax)
        return typing.cast(F, typed_class(fn)) if checked else fn
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except NameError:
        # A forward reference (e.g. to the class being defined): the contract is compiled
        # at the first call, when the name exists.
        if not jaxtyping_syntax:
            return fn
        try:
            return typing.cast(F, typed_flops(fn))
        except SpecError as exc:
            warnings.warn(f"typedflops import hook: {exc}; it is not checked", stacklevel=3)
            return fn
    except Exception:  # an annotation that does not evaluate: not ours to judge
        return fn
    if any(_contains_tensor_annotation(hint) for hint in hints.values()):
        return typing.cast(F, typed_flops(fn))
    return fn


def instrumenting(*, jaxtyping_syntax: bool) -> Callable[[F], F]:
    """The decorator that the import hook inserts: :func:`instrument` with its flag bound."""

    def decorate(fn: F) -> F:
        return instrument(fn, jaxtyping_syntax=jaxtyping_syntax)

    return decorate


# -- the syntax tree --------------------------------------------------------------------


def _decorator_name(node: ast.expr) -> str | None:
    """``no_type_check`` for ``@no_type_check``, ``@typing.no_type_check`` or ``@x(...)``."""
    if isinstance(node, ast.Call):
        return _decorator_name(node.func)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _jaxtyping_names(tree: ast.Module) -> set[str]:
    """The names a module binds to jaxtyping or to something imported from it."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "jaxtyping":
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "jaxtyping":
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


def _mentions(annotation: ast.expr, names: set[str]) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:  # a string annotation: parse it (parsing, not evaluating)
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    return any(isinstance(node, ast.Name) and node.id in names for node in ast.walk(annotation))


FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def _annotations(node: FunctionNode) -> Iterable[ast.expr]:
    arguments = node.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None]
    found = [arg.annotation for arg in every if arg.annotation is not None]
    return [*found, node.returns] if node.returns is not None else found


def _instrumenting_call(jaxtyping_syntax: bool) -> ast.expr:
    """``__typedflops_instrument__(jaxtyping_syntax=...)``, as syntax."""
    flag = ast.keyword(arg="jaxtyping_syntax", value=ast.Constant(value=jaxtyping_syntax))
    return ast.Call(func=ast.Name(id=_DECORATOR_NAME, ctx=ast.Load()), args=[], keywords=[flag])


class _Instrumenter(ast.NodeTransformer):
    """Adds the instrumenting decorator, innermost, to module-level and class-level defs."""

    def __init__(self, jaxtyping_names: set[str]) -> None:
        self.jaxtyping_names = jaxtyping_names
        self.count = 0

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        if any(_decorator_name(d) in _SKIP_DECORATORS for d in node.decorator_list):
            return node
        self.generic_visit(node)
        if not any(_decorator_name(d) == "dataclass" for d in node.decorator_list):
            return node
        # Outermost, so that it sees the class @dataclass made: a dataclass with tensor
        # fields gets its fields checked at __init__.
        fields = [s.annotation for s in node.body if isinstance(s, ast.AnnAssign)]
        syntax = any(_mentions(a, self.jaxtyping_names) for a in fields)
        node.decorator_list.insert(0, ast.copy_location(_instrumenting_call(syntax), node))
        self.count += 1
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return self._instrument(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return self._instrument(node)

    def _instrument(self, node: FunctionNode) -> ast.AST:
        # No generic_visit: functions nested in this one are left alone.
        annotations = list(_annotations(node))
        if not annotations or any(
            _decorator_name(d) in _SKIP_DECORATORS for d in node.decorator_list
        ):
            return node
        syntax = any(_mentions(a, self.jaxtyping_names) for a in annotations)
        node.decorator_list.append(ast.copy_location(_instrumenting_call(syntax), node))
        self.count += 1
        return node


def _import_position(body: Sequence[ast.stmt]) -> int:
    """After the docstring and ``from __future__`` imports, which must come first."""
    position = 0
    for index, statement in enumerate(body):
        docstring = (
            index == 0
            and isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        )
        future = isinstance(statement, ast.ImportFrom) and statement.module == "__future__"
        if docstring or future:
            position = index + 1
        else:
            break
    return position


def instrument_tree(tree: ast.Module) -> ast.Module:
    """Edit a module's syntax tree in place so that its annotated functions are checked.

    >>> tree = ast.parse(
    ...     "from jaxtyping import Float\\n"
    ...     "class A:\\n"
    ...     "    @property\\n"
    ...     "    def f(self) -> Float[Tensor, 'n']: ...\\n"
    ...     "def g(x): ...\\n")
    >>> print(ast.unparse(instrument_tree(tree)))
    from typedflops.tools.import_hook import instrumenting as __typedflops_instrument__
    from jaxtyping import Float
    <BLANKLINE>
    class A:
    <BLANKLINE>
        @property
        @__typedflops_instrument__(jaxtyping_syntax=True)
        def f(self) -> Float[Tensor, 'n']:
            ...
    <BLANKLINE>
    def g(x):
        ...
    """
    instrumenter = _Instrumenter(_jaxtyping_names(tree))
    instrumenter.visit(tree)
    if instrumenter.count:
        binding = ast.ImportFrom(
            module=__name__,
            names=[ast.alias(name="instrumenting", asname=_DECORATOR_NAME)],
            level=0,
        )
        position = _import_position(tree.body)
        anchor = tree.body[position] if position < len(tree.body) else tree.body[-1]
        tree.body.insert(position, ast.copy_location(binding, anchor))
    return ast.fix_missing_locations(tree)


# -- the import machinery ---------------------------------------------------------------


class _InstrumentingLoader(importlib.machinery.SourceFileLoader):
    """Loads a module from its source, through :func:`instrument_tree`, without bytecode."""

    def get_code(self, fullname: str) -> types.CodeType:
        path = self.get_filename(fullname)
        source = decode_source(self.get_data(path))
        tree = ast.parse(source, filename=path)
        return compile(instrument_tree(tree), path, "exec", dont_inherit=True)


class ImportHook(importlib.abc.MetaPathFinder):
    """The installed hook: finds the named packages' modules and loads them instrumented.

    Returned by :func:`install_import_hook`; ``uninstall()`` (or leaving its ``with``
    block) removes it. Modules imported meanwhile stay instrumented.
    """

    def __init__(self, packages: Sequence[str]) -> None:
        self.packages = tuple(packages)

    def covers(self, fullname: str) -> bool:
        """Whether ``fullname`` is one of the packages or a module inside one."""
        return any(fullname == p or fullname.startswith(p + ".") for p in self.packages)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if not self.covers(fullname):
            return None
        # Ask the finders after this one, in order; instrument what the first of them
        # would load from a source file. Anything else (an extension module, pytest's
        # assertion-rewriting of test files) is left to that finder.
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, ImportHook):
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
            if spec is None:
                continue
            loader = spec.loader
            if type(loader) is importlib.machinery.SourceFileLoader and spec.origin:
                spec.loader = _InstrumentingLoader(fullname, spec.origin)
                return spec
            return None
        return None

    def uninstall(self) -> None:
        """Remove the hook from ``sys.meta_path`` (a no-op if it is not there)."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def __enter__(self) -> ImportHook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()

    def __repr__(self) -> str:
        return f"ImportHook({', '.join(map(repr, self.packages))})"


def install_import_hook(*packages: str) -> ImportHook:
    """Check every jaxtyping-annotated function of ``packages`` imported from now on.

    Each name is a top-level package or a dotted subpackage/module (``"mypkg"``,
    ``"mypkg.models"``); the hook covers it and every module inside it. Returns the
    :class:`ImportHook`; call ``.uninstall()`` or use it as a context manager::

        with install_import_hook("mypkg"):
            import mypkg          # mypkg's annotated functions are now @typed_flops

    A module of ``packages`` that is already imported is not re-imported (a warning says
    which); import the package after installing the hook.
    """
    if not packages or not all(isinstance(p, str) and p for p in packages):
        raise TypeError("install_import_hook() takes one or more package names as strings")
    hook = ImportHook(packages)
    already = sorted(name for name in sys.modules if hook.covers(name))
    if already:
        warnings.warn(
            f"typedflops import hook: {', '.join(already)} already imported; "
            "they are not instrumented (install the hook before importing them)",
            stacklevel=2,
        )
    sys.meta_path.insert(0, hook)
    return hook
