"""No circles in the import graph: the package's modules import each other one way only.

import-linter's layers cannot see a circle between two modules of one floor (both sit in
`commands/`), so this test builds the graph itself with `ast`: module-level,
function-level and `TYPE_CHECKING` imports all count, relative imports resolved."""

from __future__ import annotations

import ast
from pathlib import Path

from mpirun import REPO

PACKAGES = ("osu_dl_bench", "collectives")


def _module_files(root: Path) -> dict[str, Path]:
    """Each module of the packages under root, by dotted name."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _imported_names(module: str, path: Path) -> list[str]:
    """Every dotted name an import statement anywhere in the file names (`from m import x`:
    m.x)."""
    is_package = path.name == "__init__.py"
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                # PEP 328: one dot is the current package, each further dot one level up.
                package = module.split(".") if is_package else module.split(".")[:-1]
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # A name that is not a submodule resolves to base below (import_graph).
            names += [f"{base}.{alias.name}" for alias in node.names]
    return names


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports (a name resolves to its longest module)."""
    modules = _module_files(root)
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in _imported_names(module, path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def test_the_package_has_no_import_cycles():
    cycles = import_cycles(import_graph(REPO))
    listing = "\n".join(" <-> ".join(cycle) for cycle in cycles)
    assert not cycles, f"{len(cycles)} import cycles:\n{listing}"


def test_a_type_checking_import_back_is_a_cycle(tmp_path):
    for name, text in {
        "osu_dl_bench/__init__.py": "",
        "osu_dl_bench/a.py": "from .b import run\n",
        "osu_dl_bench/b.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import Config\n"
        ),
        "osu_dl_bench/c.py": "def f():\n    from osu_dl_bench import a\n",
        "collectives/__init__.py": "",
    }.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    assert graph["osu_dl_bench.c"] == {"osu_dl_bench.a"}
    assert import_cycles(graph) == [["osu_dl_bench.a", "osu_dl_bench.b"]]
