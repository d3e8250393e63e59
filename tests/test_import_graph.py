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


#: The layers, lowest first: a module may import its own layer's modules and lower
#: layers', never a higher layer's. The docs' "Where things live" lists the same rows
#: (a test below holds them equal).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "text", "config", "syntax"),
    ("contract",),
    ("devices", "roofline"),
    ("cost",),
    ("einops",),
    ("timing",),
    ("decorator",),
    ("nn", "testing"),
    ("planning", "memory"),
    ("tools", "mypy_plugin"),
    ("__init__", "__main__"),
)


def layer_of(module: str) -> int:
    """The layer of a typedflops module (its first component below the package)."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    for number, names in enumerate(LAYERS):
        if top in names:
            return number
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def test_every_import_goes_down_the_layers() -> None:
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in graph().items()
        for target in targets
        if layer_of(target) > layer_of(source)
    )
    assert upward == []


def test_packages_of_one_layer_import_one_way() -> None:
    """Two packages of one layer never import each other both ways (a cycle between them
    would hide behind the cycle test's module granularity otherwise)."""
    edges = graph()
    between = {
        (source.split(".")[1], target.split(".")[1])
        for source, targets in edges.items()
        for target in targets
        if "." in source and "." in target and source.split(".")[1] != target.split(".")[1]
    }
    assert sorted((a, b) for a, b in between if (b, a) in between) == []


def test_the_docs_name_the_layers_in_order() -> None:
    section = (PACKAGE.parents[1] / "docs" / "layout.md").read_text()
    layer_table = section.split("| layer |", 1)[1].split("\n\n", 1)[0]
    rows = [
        line.split("|")[1].strip() for line in layer_table.splitlines() if line.startswith("| ")
    ]
    listed = [tuple(name.strip("` /") for name in row.split(",")) for row in rows]
    expected = [tuple(n for n in names if not n.startswith("__")) for names in LAYERS]
    assert [names for names in listed if names] == [names for names in expected if names]


def test_every_package_is_in_a_layer() -> None:
    for path in PACKAGE.iterdir():
        if path.name.startswith((".", "__pycache__")) or path.name == "py.typed":
            continue
        layer_of(f"typedflops.{path.name.removesuffix('.py')}")
