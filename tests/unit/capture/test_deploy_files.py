"""The node agent's deployment files: valid YAML and shell, and only options ``mldiag agent`` has."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import typer
import yaml

from mldiag.cli.main import app

DEPLOY = Path(__file__).resolve().parents[3] / "scripts" / "deploy"
SCRIPTS = sorted(DEPLOY.glob("*.sh"))


def agent_options() -> set[str]:
    command = typer.main.get_command(app).commands["agent"]  # type: ignore[attr-defined]
    return {option for parameter in command.params for option in parameter.opts}


def test_there_is_a_file_for_each_way_to_deploy():
    assert {p.name for p in SCRIPTS} >= {"slurm-prolog.sh", "slurm-epilog.sh", "gce-startup-script.sh"}
    assert (DEPLOY / "mldiag-agent-daemonset.yaml").is_file() and (DEPLOY / "README.md").is_file()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_are_valid_bash(script):
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    assert script.read_text().startswith("#!/usr/bin/env bash\n")


def test_the_daemonset_runs_the_agent_on_the_nodes_network_with_a_shared_scratch_folder():
    documents = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "mldiag-agent-daemonset.yaml").read_text())}
    assert set(documents) == {"ConfigMap", "ServiceAccount", "DaemonSet"}
    assert documents["ConfigMap"]["metadata"]["name"] == "mldiag-agent-run"
    pod = documents["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["serviceAccountName"] == documents["ServiceAccount"]["metadata"]["name"]
    (container,) = pod["containers"]
    flags = {arg.split("=", 1)[0] for arg in container["args"]}
    assert flags <= agent_options()
    assert "MLDIAG_RUN" in documents["ConfigMap"]["data"]
    scratch = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--scratch-dir="))
    assert {"name": "scratch", "mountPath": scratch} in container["volumeMounts"]


@pytest.mark.parametrize("script", [p for p in SCRIPTS if "epilog" not in p.name], ids=lambda p: p.name)
def test_scripts_use_only_options_the_agent_has(script):
    text = script.read_text()
    (command,) = re.findall(r'(?:bin/mldiag|"\$\{agent_bin\}") agent((?:.*\\\n)*.*)', text)
    port_args = [line for line in text.splitlines() if "port_args+=" in line]
    used = set(re.findall(r"(--[a-z][a-z-]+)", "\n".join([command, *port_args])))
    assert {"--machine-learning-run", "--port", "--scratch-dir"} <= used <= agent_options()
