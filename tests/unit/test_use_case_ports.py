"""Each use case is given only the ports it uses, and its type says which.

A use case in ``mldiag.services`` annotates its dependencies (``services``) with
a Protocol of that package, built from the port families of
:mod:`mldiag.services.dependencies`. The source is read with :mod:`ast`:

* every attribute read on such a parameter, or on ``self.<attr>`` set from one,
  is declared by its Protocol (the Protocol's members are resolved through its
  bases);
* where it is passed on to a function or class of ``mldiag.services`` whose
  matching parameter has a Protocol, the caller's Protocol has every member of
  the callee's (what a type checker would demand);
* nothing is annotated with the concrete ``Services``, which would hand over
  every port.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

PACKAGE = "mldiag.services"
SERVICES_CLASS = f"{PACKAGE}.dependencies.Services"
ROOT = Path(__file__).resolve().parents[2] / "shared"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_sources() -> dict[str, str]:
    return {module_name(path): path.read_text()
            for path in sorted((ROOT / PACKAGE.replace(".", "/")).rglob("*.py"))}


@dataclass
class Module:
    name: str
    tree: ast.Module
    names: dict[str, str] = field(default_factory=dict)  # local name -> qualified name

    def resolve(self, node: ast.expr) -> str | None:
        """The qualified name an expression such as ``tasks.claim`` or ``Registrar`` refers to."""
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Attribute):
            owner = self.resolve(node.value)
            return f"{owner}.{node.attr}" if owner else None
        return None


@dataclass
class Function:
    qualname: str
    node: ast.FunctionDef
    module: Module
    owner: str | None  # the class of a method

    def parameters(self) -> list[ast.arg]:
        arguments = self.node.args
        return arguments.posonlyargs + arguments.args + arguments.kwonlyargs


@dataclass
class Index:
    """The modules of the package, with their functions, classes, Protocols and module-level instances."""

    modules: dict[str, Module]
    functions: dict[str, Function] = field(default_factory=dict)
    classes: dict[str, tuple[ast.ClassDef, Module]] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # module-level NAME = Class(...) -> class

    @classmethod
    def of(cls, sources: Mapping[str, str]) -> Index:
        index = cls({name: Module(name, ast.parse(source)) for name, source in sources.items()})
        for module in index.modules.values():
            index._collect(module)
        for module in index.modules.values():
            for node in module.tree.body:
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                        and (called := module.resolve(node.value.func)) in index.classes):
                    index.instances.update({f"{module.name}.{t.id}": called
                                            for t in node.targets if isinstance(t, ast.Name)})
        return index

    def _collect(self, module: Module) -> None:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom):
                assert not node.level, f"{module.name}:{node.lineno}: the package imports absolutely"
                base = node.module
                for alias in node.names:
                    module.names[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    module.names[alias.asname or alias.name.partition(".")[0]] = \
                        alias.name if alias.asname else alias.name.partition(".")[0]
        for node in module.tree.body:
            if isinstance(node, ast.FunctionDef):
                qualname = module.names[node.name] = f"{module.name}.{node.name}"
                self.functions[qualname] = Function(qualname, node, module, None)
            elif isinstance(node, ast.ClassDef):
                qualname = module.names[node.name] = f"{module.name}.{node.name}"
                self.classes[qualname] = (node, module)
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        self.functions[f"{qualname}.{item.name}"] = Function(
                            f"{qualname}.{item.name}", item, module, qualname)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                module.names.update({t.id: f"{module.name}.{t.id}" for t in targets if isinstance(t, ast.Name)})

    def is_protocol(self, qualname: str | None) -> bool:
        if qualname not in self.classes:
            return False
        node, module = self.classes[qualname]
        return any(module.resolve(base) in ("typing.Protocol", "typing_extensions.Protocol")
                   for base in node.bases)

    def members(self, protocol: str) -> set[str]:
        """What a Protocol declares, its own and its bases'."""
        node, module = self.classes[protocol]
        own = {item.target.id for item in node.body
               if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
        own |= {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
        for base in node.bases:
            if self.is_protocol(resolved := module.resolve(base)):
                own |= self.members(resolved)
        return own

    def annotation(self, module: Module, annotation: ast.expr | None) -> str | None:
        """The Protocol of the package (or the concrete ``Services``) an annotation names, if it does."""
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            annotation = ast.parse(annotation.value, mode="eval").body
        qualname = module.resolve(annotation) if annotation is not None else None
        return qualname if qualname == SERVICES_CLASS or self.is_protocol(qualname) else None

    def callee(self, function: Function, call: ast.Call) -> tuple[Function, int] | None:
        """The function of the package a call runs, and how many leading parameters the call does not fill."""
        target = call.func
        if (function.owner and isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                and target.value.id == "self"):
            qualname: str | None = f"{function.owner}.{target.attr}"
        else:
            qualname = function.module.resolve(target)
        if qualname is None:
            return None
        if qualname in self.classes:
            qualname, skipped = f"{qualname}.__init__", 1
        elif isinstance(target, ast.Attribute) and (owner := function.module.resolve(target.value)) in self.instances:
            qualname, skipped = f"{self.instances[owner]}.{target.attr}", 1
        else:
            skipped = 1 if function.owner and qualname.startswith(f"{function.owner}.") else 0
        found = self.functions.get(qualname)
        return (found, skipped) if found else None


@dataclass(frozen=True)
class Finding:
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def _attributes_from_parameters(index: Index, class_name: str) -> dict[str, str]:
    """``self.<attr>`` of a class that its ``__init__`` sets from a parameter with a Protocol."""
    init = index.functions.get(f"{class_name}.__init__")
    if init is None:
        return {}
    typed = {arg.arg: p for arg in init.parameters() if (p := index.annotation(init.module, arg.annotation))}
    return {target.attr: typed[node.value.id]
            for node in ast.walk(init.node) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
            and node.value.id in typed
            for target in node.targets
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"}


def _tracked(function: Function, typed: dict[str, str], attributes: dict[str, str], node: ast.expr) -> str | None:
    """The Protocol of an expression that is a use case's dependencies: a parameter or ``self.<attr>``."""
    if isinstance(node, ast.Name):
        return typed.get(node.id)
    if (function.owner and isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "self"):
        return attributes.get(node.attr)
    return None


def _arguments(call: ast.Call) -> Iterator[tuple[int | str, ast.expr]]:
    yield from enumerate(call.args)
    yield from ((keyword.arg, keyword.value) for keyword in call.keywords if keyword.arg)


def _parameter(callee: Function, position: int | str, skipped: int) -> ast.arg | None:
    parameters = callee.parameters()
    if isinstance(position, str):
        return next((arg for arg in parameters if arg.arg == position), None)
    positional = (callee.node.args.posonlyargs + callee.node.args.args)[skipped:]
    return positional[position] if position < len(positional) else None


def findings(index: Index) -> Iterator[Finding]:
    for function in index.functions.values():
        where = f"{function.module.name}:{function.node.lineno} {function.node.name}"
        typed = {}
        for arg in function.parameters():
            protocol = index.annotation(function.module, arg.annotation)
            if protocol == SERVICES_CLASS:
                yield Finding(where, f"{arg.arg} is annotated with Services; name the ports it uses in a Protocol")
            elif protocol:
                typed[arg.arg] = protocol
        attributes = _attributes_from_parameters(index, function.owner) if function.owner else {}
        attributes = {name: p for name, p in attributes.items() if p != SERVICES_CLASS}
        for node in ast.walk(function.node):
            if isinstance(node, ast.Attribute) and (protocol := _tracked(function, typed, attributes, node.value)):
                if node.attr not in index.members(protocol):
                    yield Finding(f"{function.module.name}:{node.lineno}",
                                  f"reads {node.attr!r}, which {protocol.rpartition('.')[2]} does not declare")
            elif isinstance(node, ast.Call) and (found := index.callee(function, node)):
                callee, skipped = found
                for position, value in _arguments(node):
                    caller_protocol = _tracked(function, typed, attributes, value)
                    parameter = _parameter(callee, position, skipped)
                    callee_protocol = parameter and index.annotation(callee.module, parameter.annotation)
                    if not caller_protocol or not callee_protocol or callee_protocol == SERVICES_CLASS:
                        continue
                    missing = index.members(callee_protocol) - index.members(caller_protocol)
                    if missing:
                        yield Finding(f"{function.module.name}:{node.lineno}",
                                      f"passes {caller_protocol.rpartition('.')[2]} to {callee.qualname}, "
                                      f"which needs {', '.join(sorted(missing))} too")


def test_each_use_case_is_given_only_ports_its_protocol_declares():
    assert [str(finding) for finding in findings(Index.of(package_sources()))] == []


def test_the_use_cases_are_typed_with_protocols():
    """The walk sees the use cases: a module that dropped its annotations would pass the rules vacuously."""
    index = Index.of(package_sources())
    typed = {function.module.name for function in index.functions.values()
             if any(index.annotation(function.module, arg.annotation) for arg in function.parameters())}
    assert {f"{PACKAGE}.registration", f"{PACKAGE}.analysis_jobs", f"{PACKAGE}.capture.requests",
            f"{PACKAGE}.operator.maintenance", f"{PACKAGE}.run_state"} <= typed


def _with_planted(source: str) -> list[str]:
    sources = package_sources()
    sources[f"{PACKAGE}.planted"] = source
    return [str(f) for f in findings(Index.of(sources)) if f.where.startswith(f"{PACKAGE}.planted")]


PLANTED_HEADER = """
from __future__ import annotations
from typing import Protocol
from mldiag.services.dependencies import Publishing, Services, Stored
from mldiag.services import registration
from mldiag.services.registration import Registrar

class PlantedPorts(Stored, Protocol):
    pass
"""


def test_planted_read_of_an_undeclared_port_is_found():
    assert _with_planted(PLANTED_HEADER + """
def use(services: PlantedPorts) -> None:
    services.runs.get("x")
    services.bus.publish("topic", b"")
""") == [f"{PACKAGE}.planted:13: reads 'bus', which PlantedPorts does not declare"]


def test_planted_read_through_self_of_an_undeclared_port_is_found():
    assert _with_planted(PLANTED_HEADER + """
class User:
    def __init__(self, services: PlantedPorts):
        self.services = services

    def use(self) -> None:
        self.services.store.transaction(len)
        self.services.settings.bucket
""") == [f"{PACKAGE}.planted:17: reads 'settings', which PlantedPorts does not declare"]


def test_planted_caller_lacking_a_callees_port_is_found():
    found = _with_planted(PLANTED_HEADER + """
def by_module(services: PlantedPorts, event):
    return registration.registering_finalized(services, event)

def by_class(services: PlantedPorts):
    return Registrar(services=services)
""")
    assert [line.split(",")[0] for line in found] == [
        f"{PACKAGE}.planted:12: passes PlantedPorts to {PACKAGE}.registration.registering_finalized",
        f"{PACKAGE}.planted:15: passes PlantedPorts to {PACKAGE}.registration.Registrar.__init__"]
    assert all("bus" in line and "settings" in line for line in found)


def test_planted_caller_with_the_callees_ports_passes():
    assert _with_planted(PLANTED_HEADER.replace("(Stored, Protocol)", "(registration.RegistrationPorts, Protocol)")
                         + """
def by_module(services: PlantedPorts, event):
    return registration.registering_finalized(services, event)
""") == []


def test_planted_services_annotation_is_found():
    assert _with_planted(PLANTED_HEADER + """
def use(services: Services) -> None:
    services.bus.publish("topic", b"")
""") == [f"{PACKAGE}.planted:11 use: services is annotated with Services; name the ports it uses in a Protocol"]


def _only(services: object, protocol: type) -> SimpleNamespace:
    """An object with the members of ``protocol``, taken from ``services``, and nothing else."""
    index = Index.of(package_sources())
    members = index.members(f"{protocol.__module__}.{protocol.__qualname__}")
    assert members, f"{protocol.__qualname__} declares nothing"
    return SimpleNamespace(**{name: getattr(services, name) for name in sorted(members)})


@pytest.mark.parametrize("bare", [False, True], ids=["services", "registration-ports-only"])
def test_registering_finalized_runs_with_only_its_ports(embedded, bare):
    from mldiag.domain import ProfilerSession
    from mldiag.domain.envelopes import storage_finalized_event
    from mldiag.services import unit_of_work
    from mldiag.services.registration import RegistrationPorts, registering_finalized

    services = _only(embedded, RegistrationPorts) if bare else embedded
    assert not bare or not hasattr(services, "profiler")
    event = storage_finalized_event({"bucket": "profiles", "name": "team/exp/run1/plugins/profile/s1/host0.xplane.pb",
                                     "generation": "1", "size": "1000", "contentType": "application/octet-stream"})
    unit_of_work.run(services, registering_finalized(services, event))
    session = embedded.sessions.get("projects/p/locations/l/machineLearningRuns/run1/profilerSessions/s1")
    assert session.host_files["host0"].size_bytes == 1000
    assert len(embedded.store.query(ProfilerSession.collection)) == 1


def test_services_satisfies_every_family_and_each_of_its_ports_has_one(embedded):
    index = Index.of(package_sources())
    families = [name for name in index.classes
                if name.startswith(f"{PACKAGE}.dependencies.") and index.is_protocol(name)]
    declared = set().union(*(index.members(family) for family in families))
    assert len(families) == 9  # eight families of ports, and the store and bus a unit of work needs together
    assert all(hasattr(embedded, member) for member in declared)
    assert {f.name for f in dataclasses.fields(embedded)} <= declared
