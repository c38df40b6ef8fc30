"""README.md's Quickstart, word for word: its install installs what its job imports, ``mldiag up``
prints what it shows, its ``train.py`` and commands register a run whose session is analysed, and
its agent, started before the job as written, registers the job so that a capture on demand succeeds.

Only what the Quickstart says to change is substituted: the URL and the folder
``mldiag up`` prints (here it runs on a free port over a fresh data dir, the
``control_plane`` fixture) and the profiler port (any free port). The
commands name the run by its display name, as the Quickstart writes them.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from capture_support import ControlPlane, analysed, free_port, mldiag_json, wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PRINTED_URL = "http://127.0.0.1:8080"
PRINTED_DATA_DIR = "/home/me/.mldiag"
PRINTED_OTLP_ENDPOINT = "http://127.0.0.1:4317"
PROFILER_PORT = "9999"
SESSION = "first-steps"
COMMAND_TIMEOUT_S = 300


def quickstart_blocks(language: str) -> list[str]:
    """The Quickstart's fenced code blocks in ``language``, in order."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [code for fence, code in re.findall(r"^```(\w+)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
            if fence == language]


def command_lines() -> list[str]:
    """Every line of the Quickstart's shell blocks, without its trailing comment."""
    return [re.sub(r"\s+#.*$", "", line) for block in quickstart_blocks("bash") for line in block.splitlines()]


def the_command(prefix: str) -> str:
    (line,) = [line for line in command_lines() if line.startswith(prefix)]
    return line


def as_printed(text: str, control_plane: ControlPlane) -> str:
    """``text`` with the URL, the data folder and the OTLP endpoint that this ``mldiag up`` printed."""
    data_dir = re.search(r"\(data in (\S+)\)", control_plane.banner)[1]
    otlp = re.search(r"OTEL_EXPORTER_OTLP_ENDPOINT=(\S+)", control_plane.banner)[1]
    return (text.replace(PRINTED_URL, control_plane.url).replace(PRINTED_DATA_DIR, data_dir)
            .replace(PRINTED_OTLP_ENDPOINT, otlp))


def shell_environment(control_plane: ControlPlane) -> dict[str, str]:
    """This virtualenv's ``python`` and ``mldiag`` first on the PATH and the CLI pointed at ``control_plane``
    as the banner says (``MLDIAG_API_URL``); no data folder, as in a new shell."""
    environment = {name: value for name, value in os.environ.items() if name != "MLDIAG_DATA_DIR"}
    return {**environment, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "MLDIAG_API_URL": control_plane.url, "JAX_PLATFORMS": "cpu", "COLUMNS": "1000"}


def shell(command: str, cwd: Path, control_plane: ControlPlane) -> subprocess.CompletedProcess:
    """``command`` in bash, in :func:`shell_environment`."""
    result = subprocess.run(["bash", "-c", command], cwd=cwd, env=shell_environment(control_plane),
                            capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"
    return result


def test_the_quickstart_installs_every_package_its_job_imports():
    assert command_lines()[0] == "pip install -e '.[demo]'"
    (train,) = quickstart_blocks("python")
    imported = {alias.name.partition(".")[0] for node in ast.walk(ast.parse(train))
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.partition(".")[0] for node in ast.walk(ast.parse(train))
                 if isinstance(node, ast.ImportFrom) and node.module}
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    installed = {canonicalize_name(Requirement(line).name) for line in extras["demo"]}
    provided = importlib.metadata.packages_distributions()
    missing = {module for module in imported - sys.stdlib_module_names
               if not {canonicalize_name(name) for name in provided.get(module, [])} & installed}
    assert imported - sys.stdlib_module_names and not missing


def test_mldiag_up_prints_what_the_quickstart_shows(control_plane: ControlPlane):
    (console,) = quickstart_blocks("console")
    command, *shown = console.splitlines()
    assert command == "$ mldiag up"  # the fixture adds only --data, --port 0 and --otlp-port 0
    banner = shown[:next(i for i, line in enumerate(shown) if "Stop with Ctrl-C." in line) + 1]
    assert as_printed("\n".join(banner), control_plane) == control_plane.banner.rstrip("\n")


def test_train_py_registers_its_run_and_its_first_steps_are_analysed(control_plane: ControlPlane, tmp_path):
    port = str(free_port())
    (train,) = quickstart_blocks("python")
    train = as_printed(train, control_plane).replace(PROFILER_PORT, port)
    (tmp_path / "train.py").write_text(train, encoding="utf-8")

    trained = shell(as_printed(the_command(f"DIAGON_BASE_URL={PRINTED_URL} python"), control_plane), tmp_path,
                    control_plane)
    run = re.fullmatch(r"run (\S+)", trained.stdout.strip())[1]

    runs = shell(the_command("mldiag machine-learning-run list"), tmp_path, control_plane).stdout
    assert any(" my-experiment " in line and " COMPLETED " in line for line in runs.splitlines()), runs
    sessions = the_command("mldiag profiler-session list")

    def listed_done() -> bool:
        shown = shell(sessions, tmp_path, control_plane).stdout
        return any(SESSION in line.split() and "DONE" in line.split() for line in shown.splitlines())

    wait_for(listed_done, f"{SESSION} listed with its analysis DONE", timeout_s=180)
    report = analysed(control_plane, run, SESSION)
    assert report["storageFolderUri"] == f"gs://mldiag-profiles/{run}/plugins/profile/{SESSION}"
    assert report["analysis"]["health"] in ("OPTIMAL", "NEEDS_ATTENTION")


@contextlib.contextmanager
def in_the_background(command: str, cwd: Path, control_plane: ControlPlane) -> Iterator[subprocess.Popen]:
    """``command`` (written to end in ``&``) running while the block runs; its process group stopped after."""
    assert command.endswith("&"), command
    process = subprocess.Popen(["bash", "-c", command.removesuffix("&").strip()], cwd=cwd,
                               env=shell_environment(control_plane), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def test_the_agent_started_first_registers_the_job_and_captures_it_on_demand(control_plane: ControlPlane,
                                                                               tmp_path):
    port = str(free_port())
    (train,) = quickstart_blocks("python")
    (tmp_path / "train.py").write_text(as_printed(train, control_plane).replace(PROFILER_PORT, port),
                                       encoding="utf-8")
    agent = the_command("mldiag agent").replace(PROFILER_PORT, port)
    job = as_printed(the_command(f"DIAGON_BASE_URL={PRINTED_URL} TRAIN_SECONDS="), control_plane)
    targets, capture = the_command("mldiag profiler-target list"), the_command("mldiag profiler-session capture")

    with in_the_background(agent, tmp_path, control_plane), in_the_background(job, tmp_path, control_plane):
        def listed_active() -> bool:  # run alone, this test starts the job that registers the run
            listed = subprocess.run(["bash", "-c", targets], cwd=tmp_path, env=shell_environment(control_plane),
                                    capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
            return " ACTIVE" in listed.stdout

        wait_for(listed_active, "the job's target ACTIVE", timeout_s=180)
        shell(capture, tmp_path, control_plane)
    session_id = capture.split()[3]
    captured = mldiag_json(control_plane, "profiler-session", "describe", session_id,
                           "--machine-learning-run", "my-experiment")
    assert [t["sessionPhase"] for t in captured["targetSessions"].values()] == ["SUCCEEDED"]
