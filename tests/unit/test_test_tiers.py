"""The suite's own configuration (docs/testing.md): pytest-timeout with a default per test,
the markers registered and applied, and no test whose launches may outlast its timeout."""

from __future__ import annotations

import ast

import pytest
from mpirun import REPO

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

MPI_TESTS = REPO / "tests" / "mpi"


def _pytest_options() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def test_pytest_timeout_is_a_test_dependency_with_a_default_per_test():
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("pytest-timeout") for dep in extra["optional-dependencies"]["test"])
    options = _pytest_options()
    assert options["timeout"] == 300
    # signal: an overrun fails its test alone (the thread method ends the whole session).
    assert options["timeout_method"] == "signal"
    # Without the plugin the suite stops at once instead of running without timeouts.
    assert any(name.startswith("pytest-timeout") for name in options["required_plugins"])


def test_the_tier_markers_are_registered():
    names = {line.split(":")[0] for line in _pytest_options()["markers"]}
    assert {"mpi", "spmd", "slow", "cluster"} <= names
    assert "--strict-markers" in _pytest_options()["addopts"]


def _module_marks(tree: ast.Module) -> str:
    return "".join(
        ast.unparse(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(getattr(target, "id", "") == "pytestmark" for target in node.targets)
    )


def test_every_test_of_the_local_cluster_is_marked_cluster():
    tree = ast.parse((MPI_TESTS / "test_cluster.py").read_text())
    assert "pytest.mark.cluster" in _module_marks(tree)


def _numbers(tree: ast.Module) -> dict[str, float]:
    """The module's names bound to a number (JOB_TIMEOUT = 180.0)."""
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, int | float)
    }


def _launch_budget(function, functions: dict, numbers: dict, seen: frozenset = frozenset()):
    """Seconds of the ``timeout=`` its launches are given, in ``function`` and in the
    module's functions and fixtures it calls or takes (each counted once)."""
    total = 0.0
    for node in ast.walk(function):
        if isinstance(node, ast.keyword) and node.arg == "timeout":
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, int | float):
                total += value.value
            elif isinstance(value, ast.Name):
                total += numbers.get(value.id, 0)
    called = {
        node.func.id
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    called |= {arg.arg for arg in function.args.args}
    seen = seen | {function.name}
    for name in sorted(called & set(functions) - seen):
        total += _launch_budget(functions[name], functions, numbers, seen)
        seen = seen | {name}
    return total


def _timeout_of(function, default: float) -> float:
    for decorator in function.decorator_list:
        text = ast.unparse(decorator)
        if text.startswith("pytest.mark.timeout("):
            return float(decorator.args[0].value)
    return default


def test_no_test_gives_its_launches_longer_than_its_timeout():
    """pytest-timeout must not cut a test short before the launcher's own timeout says
    which job hung: a test whose launches may take longer says so with a marker."""
    default = _pytest_options()["timeout"]
    over = []
    for path in sorted(MPI_TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        numbers = _numbers(tree)
        for name, function in functions.items():
            if not name.startswith("test_"):
                continue
            budget = _launch_budget(function, functions, numbers)
            if budget > _timeout_of(function, default):
                over.append(f"{path.name}::{name}: launches {budget:.0f} s")
    assert not over, "\n".join(over)


def test_a_test_given_longer_than_the_default_timeout_is_marked_slow():
    default = _pytest_options()["timeout"]
    unmarked = []
    for path in sorted(MPI_TESTS.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef) or _timeout_of(node, default) <= default:
                continue
            if "pytest.mark.slow" not in map(ast.unparse, node.decorator_list):
                unmarked.append(f"{path.name}::{node.name}")
    assert not unmarked, "\n".join(unmarked)
