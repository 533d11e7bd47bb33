"""Every package the code imports is declared in pyproject.toml: a clean install from the
declared dependencies runs the code, the tests, the benchmarks and the scripts (a package that
only arrives as another's dependency may disappear with that package's next release)."""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TREES = ("src", "tests", "bench", "scripts")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {_normalized(re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0]) for r in requirements}


def local_modules() -> set[str]:
    """Modules of this repository (test helpers, bench, scripts, the package itself)."""
    names = set(TREES)
    for tree in TREES:
        for path in (REPO / tree).rglob("*.py"):
            names.add(path.stem)
            names.update(part for part in path.relative_to(REPO / tree).parts[:-1])
    return names


def _statements(tree: ast.AST) -> Iterator[ast.stmt]:
    """Every statement of a module, nested ones included (imports are statements, so the
    expressions, most of a module's nodes, need not be walked)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                stack.extend(children)
        if isinstance(node, ast.stmt):
            yield node


@functools.cache
def imported() -> dict[str, set[str]]:
    """Top-level module -> the files importing it (absolute imports only)."""
    out: dict[str, set[str]] = {}
    for tree in TREES:
        for path in (REPO / tree).rglob("*.py"):
            for node in _statements(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    out.setdefault(module.split(".")[0], set()).add(
                        str(path.relative_to(REPO)))
    return out


def test_every_imported_package_is_declared() -> None:
    wanted = declared()
    providers = metadata.packages_distributions()
    local = local_modules()
    missing = {}
    for module, files in sorted(imported().items()):
        if module in sys.stdlib_module_names or module in local:
            continue
        distributions = {_normalized(d) for d in providers.get(module, [])}
        assert distributions, f"{module} (imported by {sorted(files)}) is not installed"
        if not distributions & wanted:
            missing[module] = (sorted(distributions), sorted(files)[:3])
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_the_check_sees_third_party_imports() -> None:
    modules = imported()
    assert {"aiohttp", "jsonpointer", "grpc", "pytest"} <= modules.keys()
    assert "ephemera" in local_modules()
