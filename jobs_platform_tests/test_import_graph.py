"""What the import contracts (`lint-imports`, [tool.importlinter] in pyproject.toml) cannot
say: that no two modules of the package import each other, directly or through others.

Import-linter's own cycle contract (`acyclic_siblings`) works on packages, not modules: it
would refuse `location` importing a module of `orchestration` while another module of
`orchestration` imports `location`, which is no cycle. The graph is import-linter's
(grimp's), so an import inside a function counts as much as one at the top of a module.
"""

from __future__ import annotations

import grimp


def find_cycle(graph: grimp.ImportGraph) -> list[str] | None:
    """One import cycle as a path that ends where it starts, or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if cycle := visit(imported):
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph.modules):
        if cycle := visit(module):
            return cycle
    return None


def test_the_package_has_no_import_cycles():
    cycle = find_cycle(grimp.build_graph("jobs_platform", cache_dir=None))

    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_cycle_through_a_function_body_is_found():
    graph = grimp.ImportGraph()
    for module in ("pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")

    assert find_cycle(graph) is None

    graph.add_import(importer="pkg.c", imported="pkg.a")

    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
