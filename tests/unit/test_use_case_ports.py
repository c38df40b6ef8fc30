"""Each use case is given only the ports it uses: what the type checker cannot see of it.

A use case in ``mldiag.services`` types its dependencies with a Protocol built from
the port families of :mod:`mldiag.services.dependencies`; mypy (``[tool.mypy]`` in
``pyproject.toml``, run by ``.ci/run``) holds every read and every hand-over to
those Protocols, and ``tests/unit/test_type_checker.py`` has it find each family a
Protocol names in use. Two things stay out of its sight and are checked here:

* a use case annotated with the concrete ``Services`` type-checks, yet is handed
  every port; the source is read with :mod:`ast` for such annotations;
* a port of ``Services`` that no family declares is a dependency no use case can
  name; ``Services`` must also have every member a family declares.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from mldiag.services import dependencies

DEPENDENCIES = "mldiag.services.dependencies"
ROOT = Path(__file__).resolve().parents[2] / "shared"
PACKAGE = ROOT / "mldiag" / "services"


def _names_of_services(tree: ast.Module) -> set[str]:
    """The dotted names under which a module can refer to ``Services``."""
    parent, _, leaf = DEPENDENCIES.rpartition(".")
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == DEPENDENCIES:
            names |= {alias.asname or alias.name for alias in node.names if alias.name == "Services"}
        elif isinstance(node, ast.ImportFrom) and node.module == parent:
            names |= {f"{alias.asname or alias.name}.Services" for alias in node.names if alias.name == leaf}
        elif isinstance(node, ast.Import):
            names |= {f"{alias.asname or alias.name}.Services" for alias in node.names if alias.name == DEPENDENCIES}
    return names


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (owner := _dotted(node.value)):
        return f"{owner}.{node.attr}"
    return None


def _names_services(annotation: ast.expr | None, services: set[str]) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    return any(_dotted(node) in services for node in ast.walk(annotation) if isinstance(node, ast.expr))


def services_annotations(module: str, source: str) -> Iterator[str]:
    """Each parameter or attribute of ``module`` annotated with the concrete ``Services``."""
    tree = ast.parse(source)
    services = _names_of_services(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                        *filter(None, [arguments.vararg, arguments.kwarg])]:
                if _names_services(arg.annotation, services):
                    yield f"{module}:{arg.lineno} {node.name}: {arg.arg} is annotated with Services"
        elif isinstance(node, ast.AnnAssign) and _names_services(node.annotation, services):
            yield f"{module}:{node.lineno}: {ast.unparse(node.target)} is annotated with Services"


def package_sources() -> dict[str, str]:
    return {".".join(path.relative_to(ROOT).with_suffix("").parts): path.read_text()
            for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_use_case_is_handed_every_port():
    found = [finding for module, source in package_sources().items() if module != DEPENDENCIES
             for finding in services_annotations(module, source)]
    assert found == [], "name the ports a use case uses in a Protocol of its module"


PLANTED = """
from __future__ import annotations
from dataclasses import dataclass
from mldiag.services import dependencies as deps
from mldiag.services.dependencies import Services as Everything, Stored
import mldiag.services.dependencies

def by_name(services: Everything) -> None: ...
def by_module(services: deps.Services | None, stored: Stored) -> None: ...
def by_text(*, services: "mldiag.services.dependencies.Services") -> None: ...

@dataclass
class Holder:
    services: list[Everything]
"""


def test_planted_services_annotations_are_found():
    assert list(services_annotations("planted", PLANTED)) == [
        "planted:8 by_name: services is annotated with Services",
        "planted:9 by_module: services is annotated with Services",
        "planted:10 by_text: services is annotated with Services",
        "planted:14: services is annotated with Services",
    ]


def _families() -> list[type]:
    return [value for _, value in inspect.getmembers(dependencies, inspect.isclass)
            if value.__module__ == DEPENDENCIES and Protocol in value.__mro__[1:]]


def _declared(family: type) -> set[str]:
    """The ports a family declares: its members and its bases' (each a property)."""
    return {name for name, value in inspect.getmembers(family) if isinstance(value, property)}


def test_services_has_every_family_and_each_of_its_ports_has_one(embedded):
    families = _families()
    declared = set().union(*(_declared(family) for family in families))
    assert len(families) == 9  # eight families of ports, and the store and bus a unit of work needs together
    assert all(hasattr(embedded, member) for member in declared)
    assert {f.name for f in dataclasses.fields(embedded)} <= declared
