"""``install_import_hook``: check whole packages with ``@typed_flops`` without editing them.

While the hook is installed, a module imported from one of the named packages is compiled
from an edited syntax tree: every function and method whose signature has an annotation
gets the decorator ``@typed_flops``, placed *innermost* (last in its decorator list, so
applied first, to the plain function). By default every such function is checked, as
jaxtyping's hook does: jaxtyping annotations as typedflops checks them, plain hints
(``int``, ``tuple[A, B]``, a class) with beartype's semantics, through checks compiled once.
``functions="tensors"`` keeps only the functions whose resolved hints contain a jaxtyping
array annotation (``Float[Tensor, "..."]``, also inside ``list[...]``, ``X | None`` or a type
alias) and returns the others unchanged.

Functions the hook decorates are never refused: an annotation of another array type
(``Int[np.ndarray, "pos"]``, ``Float[LinearOperator, "*batch N N"]``) is checked by
jaxtyping's ``isinstance`` with the call's dims, and a hint that cannot be checked at all
is left out and noted once (:meth:`ImportHook.unchecked`; the pytest plugin prints the
notes), with the function and its file:line.

Innermost placement is what makes the hook order-safe: ``@property``, ``@staticmethod``,
``@classmethod``, ``@torch.no_grad()`` and ``functools.wraps``-based decorators all receive
the checked function and wrap it as they would wrap the plain one (``__new__``,
``__init_subclass__`` and ``__class_getitem__``, which Python makes static or class methods
by themselves, are made so). The hook never evaluates generated source: the decorator is
inserted as syntax-tree nodes and the tree is compiled with ``compile`` (as jaxtyping's and
typeguard's import hooks do).

A ``@dataclass`` gets the decorator *outermost*: its ``__init__`` checks the fields (with
``functions="tensors"``, only when one of them has a tensor annotation; see
:func:`typedflops.contract.classes.typed_class`).

What is left alone:

- functions (and classes) decorated with ``@typing.no_type_check``;
- functions already decorated with ``@typed_flops`` (their options, such as ``flops=``, stay),
  or checked by the user's own ``@jaxtyped``, ``@beartype`` or ``@typechecked``;
- ``@typing.overload`` stubs;
- functions that a compiler needs plain: ``@torch.jit.script`` (and scripted classes),
  ``torch.library.custom_op`` and its kin, ``@jit``/``@njit``; functions without any
  annotation, such as most ``@torch.jit.script`` helpers, are never touched;
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
import inspect
import sys
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Sequence
from importlib.util import decode_source
from typing import Any, TypeVar

from ..contract.annotation import is_tensor_annotation
from ..contract.classes import has_tensor_fields, typed_class
from ..contract.unchecked import check_leniently, decorating, note, notes, place
from ..decorator import TypedFunction, typed_flops
from ..errors import SpecError

__all__ = ["ImportHook", "install_import_hook"]

F = TypeVar("F", bound=Callable[..., Any])

# The name the edited module binds the instrumenting decorator to (a dunder, so it is
# neither exported by `from module import *` nor likely to clash with a user's name).
_DECORATOR_NAME = "__typedflops_instrument__"
_SKIP_DECORATORS = {
    "no_type_check",
    "typed_flops",
    "overload",
    # Checked already, by the user's own choice of checker.
    "jaxtyped",
    "beartype",
    "typechecked",
    # Compilers that need the plain function (its source, its code object).
    "script",
    "script_method",
    "script_if_tracing",
    "custom_op",
    "triton_op",
    "register_fake",
    "impl_abstract",
    "jit",
    "njit",
}
# Classes whose own decorators need their methods plain.
_SKIP_CLASS_DECORATORS = {"no_type_check", "script"}


#: What the hook checks: every function with a hint (``"all"``, as jaxtyping's hook does),
#: or only those with a jaxtyping array annotation (``"tensors"``).
FUNCTIONS = ("all", "tensors")

# Methods that Python makes class- or static methods when they are plain functions: the
# checked function takes their place as one.
_IMPLICIT = {"__init_subclass__": classmethod, "__class_getitem__": classmethod}
# Told of every function the hook decorates (the pytest plugin's report watches them from
# their first call).
_decorated: list[Callable[[TypedFunction[..., Any]], None]] = []


def on_decorated(callback: Callable[[TypedFunction[..., Any]], None]) -> Callable[[], None]:
    """Call ``callback(function)`` with every function the hook decorates from now on;
    returns a function that stops it."""
    _decorated.append(callback)
    return lambda: _decorated.remove(callback)


_IMPLICIT_STATIC = {"__new__"}


def _contains_array_annotation(hint: Any) -> bool:
    """Whether ``hint`` is, or contains, a jaxtyping array annotation (of any array type)."""
    if is_tensor_annotation(hint):
        return True
    return any(_contains_array_annotation(arg) for arg in typing.get_args(hint))


def _has_array_hint(fn: Callable[..., Any], jaxtyping_syntax: bool) -> bool:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except NameError:
        # A forward reference (e.g. to the class being defined): decided by the source.
        return jaxtyping_syntax
    except Exception:  # an annotation that does not evaluate: decided by the source
        return jaxtyping_syntax
    return any(_contains_array_annotation(hint) for hint in hints.values())


def _checked_class(cls: type, *, jaxtyping_syntax: bool, functions: str) -> type:
    if not dataclasses.is_dataclass(cls):
        return cls
    if functions == "tensors":
        found = has_tensor_fields(cls)
        if not (found or (found is None and jaxtyping_syntax)):
            return cls
    init = vars(cls).get("__init__")
    if init is None or not inspect.isfunction(init):
        return cls
    check_leniently(init)
    with decorating():
        return typed_class(cls)


def instrument(
    fn: F, *, jaxtyping_syntax: bool, functions: str = "all", in_class: bool = False
) -> F:
    """Decorate ``fn`` with ``@typed_flops``, checking what its hints allow.

    The import hook inserts this decorator. With ``functions="all"`` every function that
    reaches it (it has a hint) is checked; with ``"tensors"`` only those with a jaxtyping
    array annotation. ``jaxtyping_syntax`` says whether the annotations name jaxtyping in
    the source, and decides when a hint cannot be resolved yet (a forward reference to a
    class defined later). The function is *lenient* (see
    :mod:`typedflops.contract.unchecked`): a hint typedflops cannot compile is left
    unchecked and noted, never a reason to refuse the module. ``in_class``: defined in a
    class body, where ``__new__``, ``__init_subclass__`` and ``__class_getitem__`` are
    static or class methods without saying so.

    >>> import torch
    >>> from torch import Tensor
    >>> from jaxtyping import Float
    >>> def double(x: Float[Tensor, "n"]) -> Float[Tensor, "n"]:
    ...     return 2 * x
    >>> def add(a: int, b: int) -> int:
    ...     return a + b
    >>> type(instrument(double, jaxtyping_syntax=True)).__name__
    'TypedFunction'
    >>> type(instrument(add, jaxtyping_syntax=False)).__name__
    'TypedFunction'
    >>> instrument(add, jaxtyping_syntax=False, functions="tensors") is add
    True
    """
    if isinstance(fn, TypedFunction) or getattr(fn, "__no_type_check__", False):
        return fn
    if isinstance(fn, type):
        checked_class = _checked_class(fn, jaxtyping_syntax=jaxtyping_syntax, functions=functions)
        return typing.cast(F, checked_class)
    if not inspect.isfunction(fn):
        return fn
    if functions == "tensors" and not _has_array_hint(fn, jaxtyping_syntax):
        return fn
    check_leniently(fn)
    try:
        with decorating():
            checked: Any = typed_flops(fn)
    except SpecError as exc:  # (a lenient contract notes its own; this is what is left)
        note(f"{fn.__qualname__}() ({place(fn)}) is not checked: {exc}")
        return fn
    for callback in _decorated:
        callback(checked)
    if in_class and fn.__name__ in _IMPLICIT:
        return typing.cast(F, _IMPLICIT[fn.__name__](checked))
    if in_class and fn.__name__ in _IMPLICIT_STATIC:
        return typing.cast(F, staticmethod(checked))
    return typing.cast(F, checked)


def instrumenting(
    *, jaxtyping_syntax: bool, functions: str = "all", in_class: bool = False
) -> Callable[[F], F]:
    """The decorator that the import hook inserts: :func:`instrument` with its flags bound."""

    def decorate(fn: F) -> F:
        return instrument(
            fn, jaxtyping_syntax=jaxtyping_syntax, functions=functions, in_class=in_class
        )

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


def _instrumenting_call(jaxtyping_syntax: bool, functions: str, in_class: bool) -> ast.expr:
    """``__typedflops_instrument__(jaxtyping_syntax=...)``, as syntax."""
    flags = [ast.keyword(arg="jaxtyping_syntax", value=ast.Constant(value=jaxtyping_syntax))]
    if functions != "all":
        flags.append(ast.keyword(arg="functions", value=ast.Constant(value=functions)))
    if in_class:
        flags.append(ast.keyword(arg="in_class", value=ast.Constant(value=True)))
    return ast.Call(func=ast.Name(id=_DECORATOR_NAME, ctx=ast.Load()), args=[], keywords=flags)


class _Instrumenter(ast.NodeTransformer):
    """Adds the instrumenting decorator, innermost, to module-level and class-level defs."""

    def __init__(self, jaxtyping_names: set[str], functions: str) -> None:
        self.jaxtyping_names = jaxtyping_names
        self.functions = functions
        self.count = 0
        self.class_depth = 0

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        if any(
            _decorator_name(d) in _SKIP_DECORATORS | _SKIP_CLASS_DECORATORS
            for d in node.decorator_list
        ):
            return node
        self.class_depth += 1
        try:
            self.generic_visit(node)
        finally:
            self.class_depth -= 1
        if not any(_decorator_name(d) == "dataclass" for d in node.decorator_list):
            return node
        # Outermost, so that it sees the class @dataclass made: a dataclass gets its
        # fields checked at __init__.
        fields = [s.annotation for s in node.body if isinstance(s, ast.AnnAssign)]
        syntax = any(_mentions(a, self.jaxtyping_names) for a in fields)
        call = _instrumenting_call(syntax, self.functions, in_class=False)
        node.decorator_list.insert(0, ast.copy_location(call, node))
        self.count += 1
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return self._instrument(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return self._instrument(node)

    def _instrument(self, node: FunctionNode) -> ast.AST:
        # No generic_visit: functions nested in this one are left alone.
        annotations = list(_annotations(node))
        names = {_decorator_name(d) for d in node.decorator_list}
        if not annotations or names & _SKIP_DECORATORS or node.name.startswith("typedflops_"):
            return node  # (typedflops_dims() and kin are what checks call: never checked)
        syntax = any(_mentions(a, self.jaxtyping_names) for a in annotations)
        implicit = (
            self.class_depth > 0
            and node.name in ("__new__", "__init_subclass__", "__class_getitem__")
            and not names & {"classmethod", "staticmethod"}
        )
        call = _instrumenting_call(syntax, self.functions, in_class=implicit)
        node.decorator_list.append(ast.copy_location(call, node))
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


def instrument_tree(tree: ast.Module, functions: str = "all") -> ast.Module:
    """Edit a module's syntax tree in place so that its annotated functions are checked
    (``functions``: see :func:`install_import_hook`).

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
    instrumenter = _Instrumenter(_jaxtyping_names(tree), functions)
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

    def __init__(self, fullname: str, path: str, functions: str) -> None:
        super().__init__(fullname, path)
        self.functions = functions

    def get_code(self, fullname: str) -> types.CodeType:
        path = self.get_filename(fullname)
        source = decode_source(self.get_data(path))
        tree = ast.parse(source, filename=path)
        return compile(instrument_tree(tree, self.functions), path, "exec", dont_inherit=True)


class ImportHook(importlib.abc.MetaPathFinder):
    """The installed hook: finds the named packages' modules and loads them instrumented.

    Returned by :func:`install_import_hook`; ``uninstall()`` (or leaving its ``with``
    block) removes it. Modules imported meanwhile stay instrumented.
    """

    def __init__(self, packages: Sequence[str], functions: str = "all") -> None:
        self.packages = tuple(packages)
        self.functions = functions

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
                spec.loader = _InstrumentingLoader(fullname, spec.origin, self.functions)
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

    @staticmethod
    def unchecked() -> list[str]:
        """What was left unchecked so far and why, one line each, with the function and its
        file:line (a hint naming a class that never becomes defined, an annotation jaxtyping
        itself could not check)."""
        return notes()

    def __repr__(self) -> str:
        shown = ", ".join(map(repr, self.packages))
        return (
            f"ImportHook({shown})"
            if self.functions == "all"
            else (f"ImportHook({shown}, functions={self.functions!r})")
        )


def install_import_hook(*packages: str, functions: str = "all") -> ImportHook:
    """Check every annotated function of ``packages`` imported from now on.

    Each name is a top-level package or a dotted subpackage/module (``"mypkg"``,
    ``"mypkg.models"``); the hook covers it and every module inside it. Returns the
    :class:`ImportHook`; call ``.uninstall()`` or use it as a context manager::

        with install_import_hook("mypkg"):
            import mypkg          # mypkg's annotated functions are now @typed_flops

    ``functions="all"`` (the default, as jaxtyping's hook) checks every function and
    method with a hint, plain hints with beartype's semantics; ``functions="tensors"``
    only those with a jaxtyping array annotation. A hint typedflops cannot check is left
    unchecked and listed by :meth:`ImportHook.unchecked`, never a reason to refuse the
    module.

    A module of ``packages`` that is already imported is not re-imported (a warning says
    which); import the package after installing the hook.
    """
    if not packages or not all(isinstance(p, str) and p for p in packages):
        raise TypeError("install_import_hook() takes one or more package names as strings")
    if functions not in FUNCTIONS:
        raise TypeError(
            f"install_import_hook(functions={functions!r}): expected one of "
            + ", ".join(map(repr, FUNCTIONS))
        )
    hook = ImportHook(packages, functions)
    already = sorted(name for name in sys.modules if hook.covers(name))
    if already:
        warnings.warn(
            f"typedflops import hook: {', '.join(already)} already imported; "
            "they are not instrumented (install the hook before importing them)",
            stacklevel=2,
        )
    sys.meta_path.insert(0, hook)
    return hook
