"""A fixture name means one thing: each is defined once in tests/, so a test that asks
for it gets the same kind of value wherever it lives."""

from __future__ import annotations

import ast
from collections import defaultdict

from mpirun import REPO


def _is_fixture(node: ast.FunctionDef) -> bool:
    return any("fixture" in ast.unparse(decorator) for decorator in node.decorator_list)


def test_each_fixture_name_is_defined_once():
    homes = defaultdict(list)
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and _is_fixture(node):
                homes[node.name].append(f"{path.relative_to(REPO)}:{node.lineno}")
    twice = {name: places for name, places in homes.items() if len(places) > 1}
    assert twice == {}, f"give each its own name, or share one in a conftest: {twice}"
