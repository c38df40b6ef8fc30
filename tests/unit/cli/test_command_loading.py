"""The console script loads only the command its command line names; everything else sees every command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mldiag.cli.main import COMMANDS, build

NOT_FOR_ANALYZE = ("mldiag.cli.agent", "mldiag.client.api", "mldiag.cli.events", "mldiag.services.event_archive")


def _python(code: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_a_named_command_loads_only_its_own_module():
    shown = _python(
        "import sys; from mldiag.cli.main import run\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        f"print([name for name in {NOT_FOR_ANALYZE!r} if name in sys.modules])",
        "analyze", "--help",
    )
    assert "analyze [OPTIONS]" in shown.stdout
    assert shown.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--help"], []])
def test_help_lists_every_command(argv):
    shown = _python("from mldiag.cli.main import run; run()", *argv)
    assert all(f" {name} " in shown.stdout for name in COMMANDS)


@pytest.mark.slow
def test_an_unknown_command_is_refused_by_name():
    shown = _python("from mldiag.cli.main import run; run()", "no-such-command")
    assert shown.returncode == 2 and "No such command 'no-such-command'" in shown.stderr


def test_the_whole_app_has_every_command_and_group():
    command = build()
    names = {info.name for info in command.registered_commands} | {info.name for info in command.registered_groups}
    assert names == set(COMMANDS)


def test_commands_of_other_modules_sit_in_their_groups():
    from mldiag.cli import runs, sessions

    assert {info.name for info in sessions.app.registered_commands} >= {"capture", "list", "describe"}
    assert {info.name for info in runs.app.registered_commands} >= {
        "start-continuous-profiling", "stop-continuous-profiling", "set-auto-capture", "report-metrics"}
