"""The import hook: annotated functions of a package are checked without source edits.

``sample_pkg`` (next to this file) is imported fresh in every test, with the hook on or off:
a bad call raises ``ShapeError`` only with the hook on, for every decorator kind.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import importlib
import inspect
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from jaxtyping import Float
from torch import Tensor

from typedflops import TypedFunction
from typedflops.errors import ContractError, ShapeError
from typedflops.tools.import_hook import (
    ImportHook,
    install_import_hook,
    instrument,
    instrument_tree,
)

SAMPLE = "sample_pkg"
Loader = Callable[..., tuple[ModuleType, ModuleType]]


def _forget_sample() -> None:
    for name in [n for n in sys.modules if n == SAMPLE or n.startswith(SAMPLE + ".")]:
        del sys.modules[name]


@pytest.fixture
def load() -> Iterator[Loader]:
    """Import ``sample_pkg.functions`` and ``sample_pkg.models`` anew, hooked or not.

    Hooks installed outside the test (``pytest --typedflops=sample_pkg``) are set aside
    meanwhile, so "not hooked" means not hooked.
    """
    outside = [finder for finder in sys.meta_path if isinstance(finder, ImportHook)]
    for finder in outside:
        sys.meta_path.remove(finder)

    def load_sample(hooked: bool, functions: str = "all") -> tuple[ModuleType, ModuleType]:
        _forget_sample()
        if not hooked:
            return (
                importlib.import_module(f"{SAMPLE}.functions"),
                importlib.import_module(f"{SAMPLE}.models"),
            )
        with install_import_hook(SAMPLE, functions=functions):
            return (
                importlib.import_module(f"{SAMPLE}.functions"),
                importlib.import_module(f"{SAMPLE}.models"),
            )

    yield load_sample
    _forget_sample()
    sys.meta_path[:0] = outside


@pytest.fixture
def hooked(load: Loader) -> tuple[ModuleType, ModuleType]:
    return load(True)


@pytest.fixture
def plain(load: Loader) -> tuple[ModuleType, ModuleType]:
    return load(False)


# -- what gets decorated ----------------------------------------------------------------

DECORATED = ["linear", "scale", "first_rows", "already_decorated", "async_double"]
PLAIN_HINTS = ["add", "make_inner", "logged"]


@pytest.mark.parametrize("name", DECORATED + PLAIN_HINTS)
def test_annotated_functions_are_decorated(
    hooked: tuple[ModuleType, ModuleType], name: str
) -> None:
    functions, _ = hooked
    assert isinstance(getattr(functions, name), TypedFunction)


def test_no_type_check_is_left_alone(hooked: tuple[ModuleType, ModuleType]) -> None:
    functions, _ = hooked
    assert inspect.isfunction(functions.unchecked)


@pytest.mark.parametrize("name", ["unchecked", *PLAIN_HINTS])
def test_only_tensors_leaves_plain_hints_alone(load: Loader, name: str) -> None:
    """``functions="tensors"``: ``@no_type_check`` and functions without array hints stay."""
    functions, _ = load(True, "tensors")
    assert inspect.isfunction(getattr(functions, name))
    assert not isinstance(getattr(getattr(functions, name), "__wrapped__", None), TypedFunction)
    assert isinstance(functions.linear, TypedFunction)


def test_plain_hints_follow_beartype(hooked: tuple[ModuleType, ModuleType]) -> None:
    functions, _ = hooked
    assert functions.add(1, 2) == 3
    with pytest.raises(ContractError, match=re.escape("add(): argument 'b' violates its hint int")):
        functions.add(1, "2")


def test_hook_off_leaves_every_function_plain(plain: tuple[ModuleType, ModuleType]) -> None:
    functions, models = plain
    assert not isinstance(functions.linear, TypedFunction)
    assert not isinstance(vars(models.Projection)["mix"], TypedFunction)
    # already_decorated is decorated by hand: the same with the hook off
    assert isinstance(functions.already_decorated, TypedFunction)


def test_bad_call_raises_shape_error_only_with_the_hook(load: Loader) -> None:
    x, w = torch.ones(8, 784), torch.ones(600, 10)
    functions, _ = load(False)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        functions.linear(x, w)
    functions, _ = load(True)
    with pytest.raises(ShapeError) as info:
        functions.linear(x, w)
    assert str(info.value) == (
        "linear(): argument 'w' has shape (600, 10) but its annotation \"d_in d_out\" needs "
        "d_in=784\n"
        "  d_in=784 was bound by argument 'x' (shape (8, 784), axis 1)\n"
        "  bound so far: batch=8, d_in=784"
    )


def test_hooked_import_does_not_leave_checked_bytecode(load: Loader) -> None:
    """A hooked import writes no bytecode, so a later plain import is plain."""
    hooked, _ = load(True)
    plain, _ = load(False)
    assert isinstance(hooked.linear, TypedFunction)
    assert not isinstance(plain.linear, TypedFunction)


def test_valid_calls_give_the_same_results(load: Loader) -> None:
    x, w = torch.randn(8, 4), torch.randn(4, 3)
    plain, _ = load(False)
    hooked, _ = load(True)
    assert torch.equal(hooked.linear(x, w), plain.linear(x, w))
    assert torch.equal(hooked.scale(torch.ones(3), 2.0), torch.full((3,), 2.0))


def test_hint_through_an_alias_and_inside_a_list(hooked: tuple[ModuleType, ModuleType]) -> None:
    functions, _ = hooked
    with pytest.raises(ShapeError, match="argument 'v' has shape"):
        functions.scale(torch.ones(2, 2), 2.0)
    with pytest.raises(ShapeError, match=r"argument 'xs\[1\]'"):
        functions.first_rows([torch.ones(2, 3), torch.ones(2, 4)])


def test_already_decorated_keeps_its_options(hooked: tuple[ModuleType, ModuleType]) -> None:
    fn = hooked[0].already_decorated
    assert str(fn.formula) == "7*n"
    assert inspect.isfunction(fn.__wrapped__)  # wrapped once, not a TypedFunction in one


def test_no_type_check_function_stays_unchecked(hooked: tuple[ModuleType, ModuleType]) -> None:
    # Its annotation says "batch d_in" -> "batch d_in"; the body returns 1-D: no error.
    assert hooked[0].unchecked(torch.ones(2, 3)).shape == (3,)


def test_nested_function_is_left_alone(hooked: tuple[ModuleType, ModuleType]) -> None:
    inner = hooked[0].make_inner()
    assert not isinstance(inner, TypedFunction)
    assert inner(torch.ones(2, 2)).shape == (2, 2)


def test_async_function_is_checked(hooked: tuple[ModuleType, ModuleType]) -> None:
    functions, _ = hooked
    assert torch.equal(asyncio.run(functions.async_double(torch.ones(2))), torch.full((2,), 2.0))
    with pytest.raises(ShapeError):
        asyncio.run(functions.async_double(torch.ones(2, 2)))


def test_source_lines_are_kept(hooked: tuple[ModuleType, ModuleType]) -> None:
    fn = hooked[0].linear
    source = Path(inspect.getfile(fn.__wrapped__)).read_text().splitlines()
    line = fn.__wrapped__.__code__.co_firstlineno
    assert source[line - 1] == "def linear("
    assert inspect.getsource(fn).startswith("def linear(")


# -- order safety: each decorator kind receives the checked function --------------------


def test_method(load: Loader) -> None:
    x, y = torch.ones(2, 3), torch.ones(1, 3)
    _, models = load(False)
    assert models.Projection(torch.ones(3, 3)).mix(x, y).shape == (2, 3)  # broadcasts
    _, models = load(True)
    with pytest.raises(ShapeError, match=r"argument 'y' has shape \(1, 3\).*needs batch=2"):
        models.Projection(torch.ones(3, 3)).mix(x, y)


def test_property(load: Loader) -> None:
    _, models = load(False)
    assert models.Projection(torch.ones(2, 3, 4)).transposed.shape == (3, 2, 4)
    _, models = load(True)
    assert isinstance(vars(models.Projection)["transposed"], property)
    assert models.Projection(torch.ones(2, 3)).transposed.shape == (3, 2)
    with pytest.raises(ShapeError, match="the return value has shape \\(3, 2, 4\\)"):
        _ = models.Projection(torch.ones(2, 3, 4)).transposed


def test_staticmethod(hooked: tuple[ModuleType, ModuleType]) -> None:
    projection = hooked[1].Projection
    assert isinstance(vars(projection)["outer"], staticmethod)
    assert projection.outer(torch.ones(2), torch.ones(3)).shape == (2, 3)
    assert projection(torch.ones(1, 1)).outer(torch.ones(2), torch.ones(3)).shape == (2, 3)
    with pytest.raises(ShapeError, match=r"Projection.outer\(\): argument 'a'"):
        projection.outer(torch.ones(2, 2), torch.ones(3))


def test_classmethod(load: Loader) -> None:
    _, models = load(False)
    models.Projection.identity("3", torch.ones(3))  # unchecked: the str is not noticed
    _, models = load(True)
    projection = models.Projection
    assert isinstance(vars(projection)["identity"], classmethod)

    class Sub(projection):  # type: ignore[misc, valid-type]
        pass

    Sub.identity(3, torch.ones(3))
    assert Sub.last_caller is Sub  # cls is bound as usual (not Projection)
    with pytest.raises(ContractError, match="argument 'd' violates its hint int"):
        projection.identity("3", torch.ones(3))


def test_torch_no_grad(load: Loader) -> None:
    w = torch.ones(4, 3, requires_grad=True)
    functions, _ = load(True)
    assert not isinstance(functions.no_grad_linear, TypedFunction)  # no_grad's wrapper
    assert isinstance(functions.no_grad_linear.__wrapped__, TypedFunction)
    assert functions.no_grad_linear(torch.ones(2, 4), w).requires_grad is False
    with pytest.raises(ShapeError, match="needs d_in=4"):
        functions.no_grad_linear(torch.ones(2, 4), torch.ones(5, 3))


def test_functools_wraps_wrapper(hooked: tuple[ModuleType, ModuleType]) -> None:
    functions, _ = hooked
    functions.calls_seen.clear()
    functions.logged_linear(torch.ones(2, 4), torch.ones(4, 3))
    with pytest.raises(ShapeError, match="needs d_in=4"):
        functions.logged_linear(torch.ones(2, 4), torch.ones(5, 3))
    assert functions.calls_seen == ["logged_linear", "logged_linear"]  # outer wrapper ran
    assert list(inspect.signature(functions.logged_linear).parameters) == ["x", "w"]


def test_module_forward(load: Loader) -> None:
    _, models = load(True)
    layer = models.Layer(4, 3)
    assert layer(torch.ones(2, 4)).shape == (2, 3)
    with pytest.raises(ShapeError, match="needs d_in=4\n  d_in=4 was bound by module Layer"):
        layer(torch.ones(2, 5))
    assert str(models.Layer.forward.estimate(layer, batch=2).formula) == "2*batch*d_in*d_out"


def test_forward_reference_to_own_class(hooked: tuple[ModuleType, ModuleType]) -> None:
    projection = hooked[1].Projection
    assert isinstance(vars(projection)["combine"], TypedFunction)
    a, b = projection(torch.ones(2, 3)), projection(torch.ones(2, 3))
    assert a.combine(b).shape == (2, 2)
    with pytest.raises(ContractError, match="argument 'other'"):
        a.combine("not a projection")


# -- installing and uninstalling ---------------------------------------------------------


def test_context_manager_uninstalls() -> None:
    with install_import_hook("nothing_here") as hook:
        assert isinstance(hook, ImportHook)
        assert sys.meta_path[0] is hook
    assert hook not in sys.meta_path
    hook.uninstall()  # a second uninstall is a no-op


def test_uninstall_method(load: Loader) -> None:
    _forget_sample()
    hook = install_import_hook(SAMPLE)
    try:
        assert hook in sys.meta_path
        assert hook.covers("sample_pkg") and hook.covers("sample_pkg.functions")
        assert not hook.covers("sample_pkg_other")
    finally:
        hook.uninstall()
    assert hook not in sys.meta_path
    functions, _ = load(False)
    assert not isinstance(functions.linear, TypedFunction)


def test_already_imported_modules_are_named_in_a_warning(
    plain: tuple[ModuleType, ModuleType],
) -> None:
    with pytest.warns(
        UserWarning,
        match="sample_pkg, sample_pkg.functions, sample_pkg.models "
        "already imported; they are not instrumented",
    ):
        install_import_hook(SAMPLE).uninstall()


def test_package_names_are_checked() -> None:
    with pytest.raises(TypeError, match="one or more package names"):
        install_import_hook()
    with pytest.raises(TypeError, match="one or more package names"):
        install_import_hook("")


# -- the syntax-tree transform -----------------------------------------------------------


def _instrumented(source: str) -> str:
    return ast.unparse(instrument_tree(ast.parse(source)))


def test_import_goes_after_docstring_and_future_imports() -> None:
    source = (
        '"""Doc."""\nfrom __future__ import annotations\nimport os\ndef f(x: int) -> int: ...\n'
    )
    lines = _instrumented(source).splitlines()
    assert lines[:4] == [
        '"""Doc."""',
        "from __future__ import annotations",
        "from typedflops.tools.import_hook import instrumenting as __typedflops_instrument__",
        "import os",
    ]
    compile(instrument_tree(ast.parse(source)), "<test>", "exec")  # valid placement


def test_module_without_annotations_is_unchanged() -> None:
    source = "import os\n\ndef f(x):\n    return x"
    assert _instrumented(source) == source


@pytest.mark.parametrize(
    "skipped",
    [
        "@no_type_check",
        "@typing.no_type_check",
        "@typed_flops",
        "@typed_flops(flops='n')",
        "@typedflops.typed_flops",
        "@overload",
    ],
)
def test_skipping_decorators(skipped: str) -> None:
    source = f"{skipped}\ndef f(x: Float[Tensor, 'n']) -> None:\n    ..."
    assert "__typedflops_instrument__" not in _instrumented(source)


def test_no_type_check_class_skips_its_methods() -> None:
    source = "@no_type_check\nclass A:\n    def f(self, x: Float[Tensor, 'n']) -> None: ..."
    assert "__typedflops_instrument__" not in _instrumented(source)


def test_decorator_is_innermost_and_notes_jaxtyping_syntax() -> None:
    source = (
        "import jaxtyping as jt\n"
        "@functools.cache\n@other\ndef f(x: jt.Float[Tensor, 'n']) -> None: ...\n"
        "def g(x: 'Vector') -> None: ...\n"
    )
    assert _instrumented(source).splitlines()[3:8] == [
        "@functools.cache",
        "@other",
        "@__typedflops_instrument__(jaxtyping_syntax=True)",
        "def f(x: jt.Float[Tensor, 'n']) -> None:",
        "    ...",
    ]
    assert "@__typedflops_instrument__(jaxtyping_syntax=False)\ndef g" in _instrumented(source)


# -- the runtime filter ------------------------------------------------------------------


def test_instrument_checks_other_array_types_with_jaxtyping() -> None:
    def numpy_only(x: Float[np.ndarray, " n"]) -> Float[np.ndarray, " n"]:
        return x[:-1]

    checked: Any = instrument(numpy_only, jaxtyping_syntax=True, functions="tensors")
    with pytest.raises(ShapeError, match=re.escape("the size of dimension n is 2 which")):
        checked(np.ones(3))


def test_instrument_keeps_typed_functions_and_no_type_check() -> None:
    def f(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return x

    checked = instrument(f, jaxtyping_syntax=True)
    assert isinstance(checked, TypedFunction)
    assert instrument(checked, jaxtyping_syntax=True) is checked
    f.__no_type_check__ = True  # type: ignore[attr-defined]
    assert instrument(f, jaxtyping_syntax=True) is f


def test_instrument_with_unresolvable_hint_follows_the_syntax() -> None:
    def f(x: Undefined) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    def g(x: Float[Tensor, " n"], y: Later) -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    assert instrument(f, jaxtyping_syntax=False, functions="tensors") is f
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checked: Any = instrument(g, jaxtyping_syntax=True)
    assert isinstance(checked, TypedFunction)


# -- dataclasses ----------------------------------------------------------------------------


def test_dataclasses_with_tensor_fields_are_checked_at_init(load: Loader) -> None:
    _, models = load(True)
    batch = models.Batch(torch.ones(4, 3), torch.ones(4))
    assert isinstance(batch, models.Batch)  # still the class
    assert dataclasses.is_dataclass(batch)
    with pytest.raises(ShapeError, match=re.escape("Batch.__init__(): argument 'labels' has")):
        models.Batch(torch.ones(4, 3), torch.ones(5))
    with pytest.raises(ContractError, match="argument 'name' violates its hint str"):
        models.Batch(torch.ones(4, 3), torch.ones(4), name=3)
    # a dataclass without tensor fields, and the module's own classes, are untouched
    assert not isinstance(vars(models.Settings)["__init__"], TypedFunction)
    assert models.Settings(width=2).width == 2
    # an explicit __init__ is decorated as a method, and the class is not wrapped again
    init = vars(models.Pair)["__init__"]
    assert isinstance(init, TypedFunction)
    assert not isinstance(init.__wrapped__, TypedFunction)
    assert models.Pair(torch.ones(2, 3)).left.shape == (3,)
    with pytest.raises(ShapeError, match="argument 'both' has shape"):
        models.Pair(torch.ones(3, 3))


def test_dataclasses_are_unchecked_without_the_hook(load: Loader) -> None:
    _, models = load(False)
    assert models.Batch(torch.ones(4, 3), torch.ones(5)).labels.shape == (5,)
