"""The type checker of CI holds each use case to its Protocol of ports, and can fail.

``.ci/run`` runs ``mypy`` from the repository root, configured by ``pyproject.toml``
(``[tool.mypy]``: strict on the domain, the ports and the services). The same
configuration judges, with mypy's ``--shadow-file`` (a file checked in place of a
module of the package):

* planted use cases, in place of ``mldiag/services/__init__.py``: each planted fault
  must be reported at its line with its error code;
* each use case's Protocol with one of its families of ports left out: mypy must
  fail, or the use case is given ports it does not use.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from mypy import api

REPO = Path(__file__).resolve().parents[2]
SERVICES = REPO / "shared" / "mldiag" / "services"
STAND_IN = SERVICES / "__init__.py"
FAMILIES = SERVICES / "dependencies.py"

PLANTED = '''
from mldiag.services import unit_of_work
from mldiag.services.dependencies import Stored, Transacting


def reads_a_port_its_protocol_lacks(services: Stored) -> None:
    services.bus.publish("topic", b"")


class User:
    def __init__(self, services: Stored) -> None:
        self.services = services

    def reads_one_through_self(self) -> None:
        self.services.settings


def hands_too_few_ports_on(services: Stored) -> None:
    unit_of_work.run(services, lambda unit: None)


def hands_enough(services: Transacting) -> None:
    unit_of_work.run(services, lambda unit: None)


def untyped(services):
    return services
'''

EXPECTED = [
    ("services.bus", '"Stored" has no attribute "bus"', "attr-defined"),
    ("self.services.settings", '"Stored" has no attribute "settings"', "attr-defined"),
    ("unit_of_work.run(services, lambda unit: None)", 'incompatible type "Stored"; expected "Transacting"',
     "arg-type"),
    ("def untyped", "Function is missing a type annotation", "no-untyped-def"),
]


@pytest.mark.slow
def test_planted_faults_in_a_use_case_are_type_errors(tmp_path, monkeypatch):
    source = STAND_IN.read_text() + PLANTED
    planted = tmp_path / "planted.py"
    planted.write_text(source)
    monkeypatch.chdir(REPO)
    report, errors, status = api.run(["--shadow-file", str(STAND_IN), str(planted),
                                      "--cache-dir", str(tmp_path / "cache")])
    assert status == 1, report + errors
    lines = source.splitlines()
    found = [(int(number), message) for number, message in
             re.findall(rf"^{re.escape(str(STAND_IN.relative_to(REPO)))}:(\d+): error: (.*)$", report, re.M)]
    assert len(found) == len(EXPECTED), report
    for (number, message), (code, says, error_code) in zip(found, EXPECTED):
        assert code in lines[number - 1], (lines[number - 1], message)
        assert says in message and message.endswith(f"[{error_code}]"), message


def use_case_protocols() -> Iterator[tuple[Path, ast.ClassDef]]:
    """Each Protocol of a services module but the families' own (``services/dependencies.py``)."""
    for path in sorted(SERVICES.rglob("*.py")):
        if path != FAMILIES:
            yield from ((path, node) for node in ast.parse(path.read_text()).body
                        if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "Protocol" for b in node.bases))


@pytest.mark.slow
def test_each_family_a_use_case_names_is_one_it_uses(tmp_path, monkeypatch):
    """A use case receives only the ports it uses: without any one family of its Protocol, mypy fails."""
    monkeypatch.chdir(REPO)
    protocols = list(use_case_protocols())
    assert len(protocols) >= 20, [protocol.name for _, protocol in protocols]  # the walk sees the use cases
    unused, variant = [], tmp_path / "variant.py"
    for path, protocol in protocols:
        source = path.read_text()
        bases = [ast.unparse(base) for base in protocol.bases]
        header = f"class {protocol.name}({', '.join(bases)}):"
        assert source.count(header) == 1, f"{path}: {protocol.name}'s bases are not on one line"
        for family in bases:
            if family == "Protocol":
                continue
            kept = ", ".join(base for base in bases if base != family)
            variant.write_text(source.replace(header, f"class {protocol.name}({kept}):"))
            report, errors, status = api.run(["--shadow-file", str(path), str(variant),
                                              "--cache-dir", str(tmp_path / "cache")])
            assert status in (0, 1), errors
            if status == 0:
                unused.append(f"{path.relative_to(REPO)}: {protocol.name} names {family}, which it does not use")
    assert unused == [], "\n".join(unused)
