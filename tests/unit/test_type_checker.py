"""The type checker of CI holds each use case to its Protocol of ports, and can fail.

``.ci/run`` runs ``mypy`` from the repository root, configured by ``pyproject.toml``
(``[tool.mypy]``: strict on the domain, the ports and the services). Here the same
configuration judges planted use cases: mypy's ``--shadow-file`` checks them in
place of ``mldiag/services/__init__.py``, as a module of the services, and each
planted fault must be reported at its line with its error code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

REPO = Path(__file__).resolve().parents[2]
STAND_IN = REPO / "shared" / "mldiag" / "services" / "__init__.py"

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
