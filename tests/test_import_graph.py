"""The package's import graph has no cycle, counting every import: module level, inside
functions and under ``TYPE_CHECKING``. Data flows one way (grammar, contract, engine,
decorator and ops, then benchmarks, models, test helpers and the command line)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "typedflops"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every typedflops module ``path`` imports, wherever the import statement is."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("typedflops"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and node.module.startswith("typedflops"):
                target = node.module
            else:
                continue
            for alias in node.names:
                # ``from . import devices`` imports the submodule (the package's __init__
                # runs first, as for any import, but its lazy table imports nothing).
                module = f"{target}.{alias.name}"
                found.add(
                    module
                    if (PACKAGE.parent / module.replace(".", "/")).exists()
                    or (PACKAGE.parent / (module.replace(".", "/") + ".py")).exists()
                    else target
                )
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {t for t in imports_of(path) if t in modules and t != name}
        # Importing a package's submodule runs the package's __init__ first: it is an edge
        # to the package only if the package __init__ itself imports something.
        edges[name] = targets
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle() -> None:
    edges = graph()
    assert len(edges) > 30
    assert cycles(edges) == []


def test_the_mypy_plugin_imports_no_runtime_module() -> None:
    edges = graph()
    runtime = {name for name in edges if not name.startswith("typedflops.mypy_plugin")}
    reached: set[str] = set()
    pending = [name for name in edges if name.startswith("typedflops.mypy_plugin")]
    while pending:
        name = pending.pop()
        for target in edges[name]:
            if target not in reached:
                reached.add(target)
                pending.append(target)
    allowed = {"typedflops", "typedflops.syntax"}
    assert {name for name in reached & runtime if not name.startswith(tuple(allowed))} == set()
