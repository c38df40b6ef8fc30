"""Service agents exist before any grant names them.

Pub/Sub, Cloud Scheduler, Cloud Monitoring's notifications and Eventarc create their
agents just in time, and IAM refuses a binding to an agent that does not exist yet. So,
read over every module and example:

- an agent's email (``service-<number>@gcp-sa-....iam.gserviceaccount.com``) is only ever
  formed from ``google_project_service_identity`` resources, so whatever names it depends on
  its provisioning;
- each such resource uses ``google-beta`` (the only provider that has it) and waits for the APIs;
- each agent named through ``local.service_agents`` is one that is provisioned, and holds its
  service agent role (an agent created on request is granted none automatically).
"""

from __future__ import annotations

import re
from pathlib import Path

from terraform_config import load_module, local_values, module_dirs, walk_strings
from terraform_support import REPO, Planted
from test_terraform_consistency import plain, resources

AGENT_EMAIL = re.compile(r"service-\$\{[^}]*\}@[^\"]*gcp-sa-[^\"]*iam\.gserviceaccount\.com")
IDENTITY = "google_project_service_identity"
AGENT_REFERENCE = re.compile(r"local\.service_agents(?:\.(\w+)|\[\"(\w+)\"\])")


def agent_problems(terraform: Path) -> list[str]:
    problems = []
    for directory in module_dirs(terraform):
        blocks = load_module(directory)
        where = directory.relative_to(terraform.parent)
        for block in blocks:
            for text in walk_strings(block.body):
                if AGENT_EMAIL.search(text) and IDENTITY not in text:
                    problems.append(f"{where}: {block.address or block.kind} names a service agent "
                                    f"not read through {IDENTITY}")
    root = load_module(terraform)
    agents = plain(local_values(root).get("just_in_time_agents", {}))
    identities = resources(root, IDENTITY)
    if agents and not identities:
        problems.append(f"no {IDENTITY} provisions local.just_in_time_agents")
    for identity in identities:
        body = plain(identity.body)
        if body.get("provider") != "google-beta":
            problems.append(f"{identity.address} needs provider = google-beta")
        if "${google_project_service.enabled}" not in body.get("depends_on", []):
            problems.append(f"{identity.address} must wait for the APIs (google_project_service.enabled)")
    for block in root:
        for text in walk_strings(block.body):
            for match in AGENT_REFERENCE.finditer(text):
                name = match.group(1) or match.group(2)
                if name not in agents:
                    problems.append(f"{block.address or block.kind} names the {name} agent, which is not provisioned")
    granted = [plain(b.body) for b in resources(root, "google_project_iam_member")
               if plain(b.body).get("for_each") == "${local.just_in_time_agents}"
               and plain(b.body).get("role") == "${each.value.role}"]
    if agents and not granted:
        problems.append("the provisioned agents are not granted their service agent roles")
    missing_roles = [name for name, agent in agents.items() if not str(agent.get("role", "")).startswith("roles/")]
    problems += [f"the {name} agent has no service agent role" for name in missing_roles]
    return problems


def test_agents_are_provisioned_before_any_grant_names_them():
    assert agent_problems(REPO / "terraform") == []


def test_planted_agent_email_formed_from_the_project_number_is_reported(planted: Planted):
    planted.replace("alerting.tf", 'member  = "serviceAccount:${local.service_agents.monitoring}"',
                    'member  = "serviceAccount:service-${local.project_number}@gcp-sa-monitoring-notification.iam.gserviceaccount.com"')
    assert agent_problems(planted.terraform) == [
        "terraform: google_pubsub_topic_iam_member.monitoring_alerts_publisher names a service agent "
        f"not read through {IDENTITY}"]


def test_planted_agent_that_is_not_provisioned_is_reported(planted: Planted):
    planted.replace("service_agents.tf", '    eventarc   = { service = "eventarc.googleapis.com", domain = "gcp-sa-eventarc", role = "roles/eventarc.serviceAgent" }\n', "")
    planted.replace("alerting.tf", "local.service_agents.monitoring", "local.service_agents.eventarc")
    assert agent_problems(planted.terraform) == [
        "google_pubsub_topic_iam_member.monitoring_alerts_publisher names the eventarc agent, which is not provisioned"]


def test_planted_identity_that_does_not_wait_for_the_apis_is_reported(planted: Planted):
    planted.replace("service_agents.tf", "  depends_on = [google_project_service.enabled]\n", "")
    assert agent_problems(planted.terraform) == [
        f"{IDENTITY}.agents must wait for the APIs (google_project_service.enabled)"]


def test_planted_agent_without_its_role_is_reported(planted: Planted):
    planted.replace("service_agents.tf", "  role     = each.value.role\n", '  role     = "roles/pubsub.serviceAgent"\n')
    assert agent_problems(planted.terraform) == ["the provisioned agents are not granted their service agent roles"]
