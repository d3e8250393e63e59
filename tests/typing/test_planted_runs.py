"""Each planted bug of the held-out set (``# PLANTED:`` lines in tests/typing/corpus/) is
wrong when it runs: its ``bug_*`` function, called with tensors of the sizes the module's
``SIZES`` gives its annotated dims, under jaxtyping's runtime checks (beartype), raises,
either at the planted line (einops, torch) or on the value the function holding it
returns (jaxtyping). A bug that only a static reading calls a bug is not in the set.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import traceback
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from jaxtyping import install_import_hook

CORPUS = Path(__file__).resolve().parent / "corpus"
PLANTED = re.compile(r"#\s*PLANTED:\s*(?P<code>[\w-]+)")


@dataclass(frozen=True)
class Planted:
    """One planted line and the ``bug_*`` function that runs it."""

    path: Path
    line: int
    driver: str
    holder: str  # the function (or method) the line is in


def _functions(tree: ast.Module) -> Iterator[tuple[ast.FunctionDef, str | None]]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node, None
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    yield item, node.name


def planted_bugs() -> list[Planted]:
    """Every planted line, with its driver: the ``bug_*`` function that holds it, else the
    first one defined after it."""
    found: list[Planted] = []
    for path in sorted(CORPUS.glob("planted_*.py")):
        if path.name == "planted_bugs.py":
            continue  # the set every change must keep catching, not this held-out one
        source = path.read_text()
        tree = ast.parse(source)
        functions = list(_functions(tree))
        drivers = [f for f, owner in functions if owner is None and f.name.startswith("bug_")]
        for number, text in enumerate(source.splitlines(), start=1):
            if not PLANTED.search(text) or text.lstrip().startswith(('"', "One bug")):
                continue
            holder = next(
                f for f, _ in functions if f.lineno <= number <= (f.end_lineno or f.lineno)
            )
            driver = next(
                (d for d in drivers if d.lineno <= number <= (d.end_lineno or d.lineno)),
                None,
            ) or next(d for d in drivers if d.lineno > number)
            found.append(Planted(path, number, driver.name, holder.name))
    return found


def _import(path: Path) -> ModuleType:
    """The corpus module, every annotated function in it checked at run time (jaxtyping's
    import hook works on a module imported by name)."""
    if str(CORPUS) not in sys.path:
        sys.path.insert(0, str(CORPUS))
    with install_import_hook(path.stem, "beartype.beartype"):
        return importlib.import_module(path.stem)


def _tensor(hint: Any, sizes: dict[str, Any]) -> torch.Tensor:
    shape: list[int] = []
    for dim in hint.dim_str.split():
        dim = dim.lstrip("#")
        if dim.isdigit():
            shape.append(int(dim))
        elif dim.startswith("*"):
            shape.extend(sizes[dim[1:]])
        elif dim == "...":
            continue
        else:
            shape.append(sizes[dim])
    dtypes = set(hint.dtypes)
    if "bool" in dtypes:
        return torch.rand(shape) > 0.5
    if "int64" in dtypes and "float32" not in dtypes:
        return torch.randint(0, 3, shape)
    return torch.randn(shape)


def _arguments(function: Callable[..., Any], sizes: dict[str, Any]) -> list[torch.Tensor]:
    hints = typing.get_type_hints(getattr(function, "__wrapped__", function))
    arguments = []
    for name, parameter in inspect.signature(function).parameters.items():
        if parameter.default is not inspect.Parameter.empty:
            continue
        arguments.append(_tensor(hints[name], sizes))
    return arguments


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("bug", planted_bugs(), ids=lambda b: f"{b.path.stem}:{b.line}")
def test_each_planted_bug_fails_when_it_runs(bug: Planted) -> None:
    module = _import(bug.path)
    driver = getattr(module, bug.driver)
    torch.manual_seed(0)
    arguments = _arguments(driver, module.SIZES)
    with pytest.raises(Exception) as raised:
        driver(*arguments)
    error = raised.value
    frames = traceback.extract_tb(error.__traceback__)
    at_the_line = any(
        Path(frame.filename) == bug.path and frame.lineno == bug.line for frame in frames
    )
    message = str(error)
    on_its_return = "checking the return value of" in message and bug.holder in message
    harness = "checking the parameters of" in message and not at_the_line
    assert not harness, f"the harness's tensors do not fit: {message}"
    assert at_the_line or on_its_return, f"failed elsewhere: {type(error).__name__}: {message}"


def test_the_held_out_set_has_forty_bugs() -> None:
    assert len(planted_bugs()) >= 40
