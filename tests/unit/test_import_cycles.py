"""No import cycle between the modules of the package (and the functions deployed from it).

Every ``import`` and ``from ... import`` counts, at module level or inside a
function, except those under ``if TYPE_CHECKING:``, which never run. Importing
``a.b.c`` also imports the packages ``a`` and ``a.b`` (Python runs their
``__init__`` first), except those that contain the importer. A cycle is a group
of modules that reach each other through imports (a strongly connected
component of more than one module), or a module that imports itself.
"""

from __future__ import annotations

import pytest
import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ((REPO / "shared", "mldiag/**/*.py"), (REPO, "functions/*/main.py"))

Graph = dict[str, dict[str, list[str]]]  # importer -> imported -> where ("path:line")


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking_guard(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def imported_names(nodes: Iterable[ast.AST], package: str) -> Iterator[tuple[str, int]]:
    """(dotted name, line) of every import in or below ``nodes`` that can run; ``from a import b`` gives
    ``a.b``. ``package`` is the package a relative import starts from."""
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            origin = ".".join(part for part in (base, node.module) if part)
            yield from ((f"{origin}.{alias.name}", node.lineno) for alias in node.names)
        elif _is_type_checking_guard(node):
            yield from imported_names(node.orelse, package)
        else:
            yield from imported_names(ast.iter_child_nodes(node), package)


def import_graph(sources: tuple[tuple[Path, str], ...] = SOURCES) -> Graph:
    """Which of our modules each of our modules imports, and where."""
    files = {module_name(path, root): (path, root) for root, pattern in sources for path in sorted(root.glob(pattern))}
    graph: Graph = {}
    for module, (path, root) in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges = graph.setdefault(module, {})
        for dotted, line in imported_names(ast.parse(path.read_text(encoding="utf-8")).body, package):
            target = _deepest_module(dotted, files)
            where = f"{path.relative_to(root)}:{line}"
            for imported in _with_packages_run_first(target, module, files) if target else ():
                if where not in edges.get(imported, ()):
                    edges.setdefault(imported, []).append(where)
    return graph


def _with_packages_run_first(target: str, importer: str, modules: dict[str, object]) -> list[str]:
    """``target`` and those of its packages whose ``__init__`` importing it runs: not the importer's own."""
    parts = target.split(".")
    packages = [".".join(parts[:depth]) for depth in range(1, len(parts))]
    return [package for package in packages
            if package in modules and not f"{importer}.".startswith(f"{package}.")] + [target]


def _deepest_module(dotted: str, modules: dict[str, object]) -> str | None:
    """The longest prefix of ``dotted`` that is one of ``modules`` (``a.b.name`` is ``a.b`` unless
    ``name`` is a submodule), or None for a module not ours."""
    parts = dotted.split(".")
    return next((".".join(parts[:depth]) for depth in range(len(parts), 0, -1)
                 if ".".join(parts[:depth]) in modules), None)


def strongly_connected_components(graph: Graph) -> list[list[str]]:
    """Tarjan's algorithm: every group of modules that import each other, directly or not."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = lowest[module] = len(index)
        stack.append(module)
        for imported in graph.get(module, {}):
            if imported not in index:
                visit(imported)
                lowest[module] = min(lowest[module], lowest[imported])
            elif imported in stack:
                lowest[module] = min(lowest[module], index[imported])
        if lowest[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            components.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return components


def import_cycles(graph: Graph) -> list[str]:
    """Each cycle: its modules, then the imports between them, one per line."""
    cycles = []
    for component in sorted(strongly_connected_components(graph)):
        if len(component) == 1 and component[0] not in graph[component[0]]:
            continue
        members = set(component)
        imports = [f"  {where} imports {imported}" for importer in component
                   for imported, places in sorted(graph[importer].items()) if imported in members
                   for where in places]
        cycles.append(" <-> ".join(component) + "\n" + "\n".join(imports))
    return cycles


@pytest.mark.slow
def test_no_module_imports_itself_through_others():
    cycles = import_cycles(import_graph())
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(cycles)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_cycle_through_a_function_level_import_is_named_with_its_imports(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "def later():\n    from . import c\n",
        "pkg/c.py": "import json\n\nclass C:\n    def method(self):\n        import pkg.a\n",
    })
    assert import_cycles(import_graph(((tmp_path, "pkg/**/*.py"),))) == [
        "pkg.a <-> pkg.b <-> pkg.c\n  pkg/a.py:1 imports pkg.b\n  pkg/b.py:2 imports pkg.c\n"
        "  pkg/c.py:5 imports pkg.a"]


def test_a_cycle_through_a_package_init_that_an_import_runs_is_named(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/web/__init__.py": "from pkg.web.app import create\n",
        "pkg/web/app.py": "from pkg import ui\nfrom pkg.web import auth\n",
        "pkg/web/auth.py": "",
        "pkg/ui.py": "from pkg.web.auth import Guard\n",
    })
    assert import_cycles(import_graph(((tmp_path, "pkg/**/*.py"),))) == [
        "pkg.ui <-> pkg.web <-> pkg.web.app\n  pkg/ui.py:1 imports pkg.web\n"
        "  pkg/web/__init__.py:1 imports pkg.web.app\n  pkg/web/app.py:1 imports pkg.ui"]


def test_a_module_importing_itself_is_a_cycle(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "from pkg.sub import helper\n", "pkg/sub/__init__.py": "",
                      "pkg/sub/tool.py": "def run():\n    from ..sub.tool import run\n"})
    assert import_cycles(import_graph(((tmp_path, "pkg/**/*.py"),))) == [
        "pkg.sub.tool\n  pkg/sub/tool.py:2 imports pkg.sub.tool"]


def test_imports_under_type_checking_are_not_followed(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from typing import TYPE_CHECKING\nimport pkg.b\n",
        "pkg/b.py": ("import typing\nif typing.TYPE_CHECKING:\n    from pkg import a\nelse:\n    import pkg.c\n"
                     "if TYPE_CHECKING:\n    from pkg.a import thing\n"),
        "pkg/c.py": "",
    })
    assert import_graph(((tmp_path, "pkg/**/*.py"),)) == {
        "pkg": {}, "pkg.a": {"pkg.b": ["pkg/a.py:2"]}, "pkg.b": {"pkg.c": ["pkg/b.py:5"]}, "pkg.c": {}}
