"""The public surface: every name in ``typedflops.__all__`` imports and is what it says."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

import typedflops


@pytest.mark.parametrize("name", typedflops.__all__)
def test_every_public_name_imports(name: str) -> None:
    value = getattr(typedflops, name)
    assert value is not None
    assert getattr(typedflops, name) is value  # cached: one object per name
    module = importlib.import_module(getattr(value, "__module__", None) or value.__name__)
    assert module.__name__.startswith("typedflops")


def test_all_is_sorted_unique_and_matches_dir() -> None:
    assert list(typedflops.__all__) == sorted(set(typedflops.__all__))
    assert dir(typedflops) == sorted(typedflops.__all__)


def test_submodules_are_modules() -> None:
    for name in ("devices", "memory", "nn", "planning"):
        module = getattr(typedflops, name)
        assert isinstance(module, types.ModuleType)
        assert module is importlib.import_module(f"typedflops.{name}")


def test_error_classes_are_exported_from_one_place() -> None:
    from typedflops import errors

    for name in errors.__all__:
        assert getattr(typedflops, name) is getattr(errors, name)


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = typedflops.nope  # type: ignore[attr-defined]


def test_a_lazy_name_whose_import_breaks_says_what_broke() -> None:
    # An AttributeError raised while a lazily imported module loads (a torch without an op
    # the module names) would otherwise read as "cannot import name 'record'".
    script = (
        "import sys, types\n"
        "broken = types.ModuleType('typedflops.cost.engine.report')\n"
        "sys.modules['typedflops.cost.engine.report'] = broken\n"
        "from typedflops import record\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "ImportError: typedflops.record: importing typedflops.cost.engine.report failed: "
        "module 'typedflops.cost.engine.report' has no attribute 'record'"
    )


def test_public_callables_have_docstrings() -> None:
    for name in typedflops.__all__:
        value = getattr(typedflops, name)
        assert (value.__doc__ or "").strip(), f"typedflops.{name} has no docstring"


def test_the_type_checkers_imports_are_the_export_table() -> None:
    """``__init__``'s ``TYPE_CHECKING`` imports (what mypy sees) name every export, from
    the module the lazy lookup imports it from, and nothing else."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(typedflops.__file__).read_text())
    seen: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                for alias in statement.names:
                    assert alias.asname == alias.name  # an explicit re-export
                    seen[alias.name] = "" if statement.module is None else statement.module
    assert seen == typedflops._EXPORTS
