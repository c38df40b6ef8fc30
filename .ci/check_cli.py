"""The installed ``mldiag`` works as a newcomer runs it: every command's and group's ``--help``,
``--version``, and a run created, listed and described against a fresh ``mldiag up``.

``.ci/run`` runs it with the Python of a virtualenv that has the base install only
(``pip install -e .``), so a module imported but not declared as a dependency fails
here as it would for a user. The commands come from the app itself, not a list.
Exits 1, after every check, if any failed.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import typer.main

from mldiag.cli.main import build

MLDIAG = str(Path(sys.executable).parent / "mldiag")
ENV = {**{name: value for name, value in os.environ.items() if not name.startswith("MLDIAG_")}, "COLUMNS": "200"}
COMMAND_TIMEOUT_S = 120
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
RUN_ID = "ci-base-install"


def command_paths(command: object, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """``path`` for ``command``, then every group and command below it, depth first."""
    yield path
    for name, subcommand in getattr(command, "commands", {}).items():
        yield from command_paths(subcommand, (*path, name))


def mldiag(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MLDIAG, *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=ENV)


def _report(argv: tuple[str, ...], ok: bool) -> None:
    print(f"{'ok  ' if ok else 'FAIL'} mldiag {' '.join(argv)}", flush=True)


def _failure(argv: tuple[str, ...], result: subprocess.CompletedProcess) -> str:
    shown = (result.stderr or result.stdout).strip().splitlines()[-5:]
    return f"`mldiag {' '.join(argv)}` exited {result.returncode}:\n    " + "\n    ".join(shown)


def check_help() -> list[str]:
    try:
        app = typer.main.get_command(build())
    except ImportError as error:
        return [f"the commands do not load in this install: {type(error).__name__}: {error}"]
    failures = []
    for path in command_paths(app):
        argv = (*path, "--help")
        result = mldiag(*argv)
        shown = result.returncode == 0 and " ".join(("Usage: mldiag", *path)) in result.stdout
        _report(argv, shown)
        if not shown:
            failures.append(_failure(argv, result))
    return failures


def check_version() -> list[str]:
    result = mldiag("--version")
    shown = result.returncode == 0 and re.fullmatch(r"mldiag \S+", result.stdout.strip()) is not None
    _report(("--version",), shown)
    return [] if shown else [_failure(("--version",), result)]


class StartFailed(Exception):
    """``mldiag up`` exited or printed no banner."""


class Up:
    """``mldiag up --port 0`` over ``data``; its URL is read from the banner it prints."""

    def __init__(self, data: Path) -> None:
        self.log = data.parent / "up.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen([MLDIAG, "up", "--port", "0", "--otlp-port", "0", "--data", str(data)],
                                            env=ENV, stdout=subprocess.PIPE, stderr=log, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put("")

    def url_from_banner(self) -> str:
        banner = ""
        while "Ctrl-C" not in banner:
            try:
                line = self.lines.get(timeout=START_TIMEOUT_S)
            except queue.Empty:
                raise StartFailed(f"mldiag up printed no banner within {START_TIMEOUT_S}s:\n{banner}") from None
            if not line:
                raise StartFailed(f"mldiag up exited with {self.process.wait()}:\n{self.log.read_text()[-3000:]}")
            banner += line
        print(banner, end="", flush=True)
        return re.search(r"DIAGON_BASE_URL=(\S+)", banner)[1]

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def _json_names(output: str) -> list[str]:
    shown = json.loads(output)
    return [resource["name"] for resource in (shown if isinstance(shown, list) else [shown])]


def _yaml_names(output: str) -> list[str]:
    return re.findall(r"^name: (\S+)$", output, re.MULTILINE)


def check_round_trip(work: Path) -> list[str]:
    """Create a run, find it in the list, describe it (in YAML, the default), stop ``mldiag up`` cleanly."""
    up = Up(work / "data")
    failures = []
    try:
        url = up.url_from_banner()
        for argv, names in ((("machine-learning-run", "create", RUN_ID, "--format", "json"), _json_names),
                            (("machine-learning-run", "list", "--format", "json"), _json_names),
                            (("machine-learning-run", "describe", RUN_ID), _yaml_names)):
            result = mldiag(*argv, "--api-url", url)
            _report(argv, result.returncode == 0)
            if result.returncode != 0:
                failures.append(_failure(argv, result))
            elif not any(name.endswith(f"/machineLearningRuns/{RUN_ID}") for name in names(result.stdout)):
                failures.append(f"`mldiag {' '.join(argv)}` did not show the run {RUN_ID}:\n{result.stdout}")
    except StartFailed as error:
        failures.append(str(error))
    finally:
        status = up.stop()
    if status != 0:
        failures.append(f"mldiag up exited {status} on SIGTERM:\n{up.log.read_text()[-3000:]}")
    return failures


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="mldiag-check-cli-") as work:
        failures = check_help() + check_version() + check_round_trip(Path(work))
    for failure in failures:
        print(f"check_cli: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
