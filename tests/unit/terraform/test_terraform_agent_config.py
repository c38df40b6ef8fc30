"""The GKE node agent's settings come from Terraform, never from values typed into the DaemonSet.

``scripts/deploy/mldiag-agent-daemonset.yaml`` reads its deployment settings from a
ConfigMap it does not define; the output ``agent_configmap`` renders that ConfigMap from
``local.agent_settings``, whose URL and ID token audience are the control plane's URL.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from terraform_config import load_module, local_values
from terraform_support import REPO, Planted
from test_terraform_consistency import plain

DAEMONSET = "scripts/deploy/mldiag-agent-daemonset.yaml"
FROM_TERRAFORM = {"MLDIAG_API_URL", "MLDIAG_AUTH_AUDIENCE", "MLDIAG_PROJECT", "MLDIAG_LOCATION"}


def _rendered_configmaps(terraform: Path) -> dict[str, dict]:
    """ConfigMaps an output renders: name => the settings local it holds."""
    root = load_module(terraform)
    settings = plain(local_values(root))
    rendered = {}
    for block in root:
        value = str(block.body.get("value", "")) if block.kind == "output" else ""
        found = re.search(r'kind = "ConfigMap", metadata = \{name = "([\w-]+)".*data = local\.(\w+)', value)
        if found:
            rendered[found.group(1)] = settings.get(found.group(2), {})
    return rendered


def agent_config_problems(root: Path) -> list[str]:
    documents = list(yaml.safe_load_all((root / DAEMONSET).read_text(encoding="utf-8")))
    defined = {d["metadata"]["name"]: d.get("data", {}) for d in documents if d["kind"] == "ConfigMap"}
    (daemonset,) = [d for d in documents if d["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    read = [source["configMapRef"]["name"] for source in container.get("envFrom", [])]
    rendered = _rendered_configmaps(root / "terraform")
    problems = [f"the DaemonSet sets {key} by hand (ConfigMap {name})"
                for name, data in defined.items() for key in sorted(FROM_TERRAFORM & set(data))]
    for name in read:
        if name not in defined and name not in rendered:
            problems.append(f"the DaemonSet reads ConfigMap {name}, which neither it nor a Terraform output defines")
    settings = {key: value for name in read for key, value in rendered.get(name, {}).items()}
    for key in ("MLDIAG_API_URL", "MLDIAG_AUTH_AUDIENCE"):
        if settings.get(key) != "${local.control_plane_url}":
            problems.append(f"{key} does not come from the control plane's URL in Terraform")
    return problems


def test_the_daemonset_takes_the_deployments_settings_from_terraform():
    assert agent_config_problems(REPO) == []


def test_planted_url_typed_into_the_daemonset_is_reported(planted: Planted):
    daemonset = (REPO / DAEMONSET).read_text(encoding="utf-8")
    planted.write(DAEMONSET, daemonset.replace('  MLDIAG_RUN: "my-training-run"\n', '  MLDIAG_RUN: "my-training-run"\n'
                  '  MLDIAG_API_URL: "https://REGION-PROJECT.cloudfunctions.net/control_plane"\n'))
    assert agent_config_problems(planted.root) == ["the DaemonSet sets MLDIAG_API_URL by hand (ConfigMap mldiag-agent-run)"]


def test_planted_audience_that_is_not_the_url_is_reported(planted: Planted):
    planted.write(DAEMONSET, (REPO / DAEMONSET).read_text(encoding="utf-8"))
    planted.replace("main.tf", "    MLDIAG_AUTH_AUDIENCE = local.control_plane_url\n",
                    '    MLDIAG_AUTH_AUDIENCE = "https://${var.region}-${var.project_id}.cloudfunctions.net/control_plane"\n')
    assert agent_config_problems(planted.root) == [
        "MLDIAG_AUTH_AUDIENCE does not come from the control plane's URL in Terraform"]
