"""The package's import graph: nothing imports the code location, and there are no cycles.

The graph is read from the source with `ast`, so an import inside a function counts as
much as one at the top of a module: it is a dependency all the same, only a later one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jobs_platform

PACKAGE_ROOT = Path(jobs_platform.__file__).parent
CODE_LOCATION = "jobs_platform.definitions"


def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its `__init__.py`)."""
    modules = {}
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            # `from a import b` imports the module a.b when there is one, else a name of a.
            found.update(
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            )
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that ends where it starts, or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(graph[module]):
            if cycle := visit(imported):
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if cycle := visit(module):
            return cycle
    return None


def test_no_module_of_the_package_imports_the_code_location():
    importers = sorted(
        module for module, imported in import_graph().items() if CODE_LOCATION in imported
    )

    assert importers == [], f"{CODE_LOCATION} is imported by {importers}"


def test_the_package_has_no_import_cycles():
    cycle = find_cycle(import_graph())

    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()

    # jobs_platform/cli/main.py imports the commands inside `_parser`.
    assert "jobs_platform.cli.bench" in graph["jobs_platform.cli.main"]
