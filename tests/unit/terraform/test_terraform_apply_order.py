"""A first apply on a fresh project: what each step needs exists, and has been seen, before it runs.

- the build account may read ``gcf-v2-sources-<project number>-<region>``, the bucket
  Cloud Functions (gen2) copies each source archive into and Cloud Build reads it from,
  and the functions are built only once it may;
- the functions (their builds and triggers) wait, through a ``time_sleep``, for the APIs,
  the build account's grants, the storage agent's publisher grant and the service agents'
  roles to propagate, and a storage trigger for its own account's eventReceiver grant; each
  wait names in its ``triggers`` the grants it waits after (a replaced grant waits again),
  and lasts ``var.iam_propagation_seconds`` (60 s by default);
- a function that mounts Secret Manager secrets is deployed after its secretAccessor grants;
- the Firestore indexes are created after the TTL fields, the first metadata write on a new
  database, rather than all at once with it.

No provider can run here, so these read the configuration as written (python-hcl2); only a
real apply shows how long propagation takes (see terraform/README.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from terraform_config import Block, load_module
from terraform_support import REPO, Planted
from test_terraform_consistency import plain, resources

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs

FUNCTION_SOURCES = "gcf-v2-sources-${var.project_number}-${var.region}"
MINIMUM_WAIT_S = 60


def _seconds(duration: str) -> int:
    return sum(int(n) * {"s": 1, "m": 60, "h": 3600}[unit] for n, unit in re.findall(r"(\d+)([smh])", duration))


def _named(blocks: list[Block], type_name: str, name: str) -> dict:
    return next((plain(b.body) for b in resources(blocks, type_name) if b.labels[1] == name), {})


def build_problems(terraform: Path) -> list[str]:
    build = load_module(terraform / "modules/build")
    locals_ = {k: v for b in build if b.kind == "locals" for k, v in plain(b.body).items()}
    bucket = locals_.get("function_sources_bucket")
    problems = []
    grants = [plain(b.body) for b in resources(build, "google_project_iam_member")
              if plain(b.body).get("member") == "${google_service_account.build.member}"
              and plain(b.body).get("role") == "roles/storage.objectViewer"]
    readable = [g for g in grants if bucket == FUNCTION_SOURCES and "${local.function_sources_bucket}" in
                str(g.get("condition", [{}])[0].get("expression"))]
    if not readable:
        problems.append(f"the build account cannot read {FUNCTION_SOURCES} (objectViewer limited to that bucket)")
    outputs = {b.labels[0]: plain(b.body) for b in build if b.kind == "output"}
    waits_for = outputs.get("service_account_id", {}).get("depends_on", [])
    if readable and "${google_project_iam_member.build_function_sources}" not in waits_for:
        problems.append("output service_account_id must wait for the build account's grant on the function sources")
    return problems


def _default_seconds(module: Path, duration: str) -> int:
    """Seconds of a ``create_duration`` in ``module``, also when written ``"${var.X}s"`` (X's default)."""
    name = re.fullmatch(r"\$\{var\.(\w+)\}s", duration)
    if name is None:
        return _seconds(duration)
    declared = {b.labels[0]: plain(b.body) for b in load_module(module) if b.kind == "variable"}
    return int(declared.get(name.group(1), {}).get("default", 0))


def propagation_problems(terraform: Path) -> list[str]:
    root = load_module(terraform)
    problems = []
    call = next((plain(b.body) for b in root if b.kind == "module" and b.labels[0] == "function"), {})
    sleeps = [d.split(".")[1].rstrip("}") for d in call.get("depends_on", []) if d.startswith("${time_sleep.")]
    sleep = _named(root, "time_sleep", sleeps[0]) if sleeps else {}
    if not sleep:
        problems.append("module.function must depend on a time_sleep (grants and APIs propagate)")
    else:
        waited = str(sleep.get("triggers", {})) + str(sleep.get("depends_on", []))
        for needed in ("google_project_service.enabled", "module.build.service_account_id",
                       "module.profiles.event_source"):
            if needed not in waited:
                problems.append(f"time_sleep.{sleeps[0]} does not wait for {needed}")
        if "google_project_iam_member.service_agents" not in str(sleep.get("triggers", {})):
            problems.append(f"time_sleep.{sleeps[0]} is not tied to the service agents' role grants")
        if _default_seconds(terraform, sleep.get("create_duration", "")) < MINIMUM_WAIT_S:
            problems.append(f"time_sleep.{sleeps[0]} waits less than {MINIMUM_WAIT_S} s")
    function = load_module(terraform / "modules/function")
    deployed = _named(function, "google_cloudfunctions2_function", "this")
    trigger_sleep = _named(function, "time_sleep", "trigger_grants")
    seconds = _default_seconds(terraform / "modules/function", trigger_sleep.get("create_duration", ""))
    if ("${time_sleep.trigger_grants}" not in deployed.get("depends_on", [])
            or "google_project_iam_member.trigger_receiver" not in str(trigger_sleep.get("triggers", {}))
            or seconds < MINIMUM_WAIT_S):
        problems.append("the function's storage trigger must wait for its account's eventReceiver grant to propagate")
    return problems


def test_the_build_account_reads_the_function_sources_bucket():
    assert build_problems(REPO / "terraform") == []


def test_functions_and_triggers_wait_for_propagation():
    assert propagation_problems(REPO / "terraform") == []


def test_planted_missing_function_sources_grant_is_reported(planted: Planted):
    planted.replace("modules/build/main.tf", 'function_sources_bucket = "gcf-v2-sources-${var.project_number}-${var.region}"',
                    'function_sources_bucket = "${var.prefix}-sources"')
    assert build_problems(planted.terraform) == [
        f"the build account cannot read {FUNCTION_SOURCES} (objectViewer limited to that bucket)"]


def test_planted_function_without_propagation_wait_is_reported(planted: Planted):
    planted.replace("main.tf", "depends_on           = [time_sleep.iam_propagation]",
                    "depends_on           = [google_project_service.enabled]")
    assert propagation_problems(planted.terraform) == [
        "module.function must depend on a time_sleep (grants and APIs propagate)"]


def test_planted_wait_untied_from_the_service_agents_is_reported(planted: Planted):
    planted.replace("main.tf", "    agent_roles   = join(\" \", [for grant in google_project_iam_member.service_agents : grant.id])\n", "")
    assert propagation_problems(planted.terraform) == [
        "time_sleep.iam_propagation is not tied to the service agents' role grants"]


def test_planted_trigger_wait_untied_from_its_grants_is_reported(planted: Planted):
    planted.replace("modules/function/main.tf", "    receiver = google_project_iam_member.trigger_receiver[0].id\n", "")
    assert propagation_problems(planted.terraform) == [
        "the function's storage trigger must wait for its account's eventReceiver grant to propagate"]


def test_planted_short_default_wait_is_reported(planted: Planted):
    planted.replace("variables.tf", "  default     = 60\n  validation {\n    condition     = var.iam_propagation_seconds",
                    "  default     = 10\n  validation {\n    condition     = var.iam_propagation_seconds")
    assert propagation_problems(planted.terraform) == [f"time_sleep.iam_propagation waits less than {MINIMUM_WAIT_S} s"]


def test_planted_wait_that_misses_the_storage_agent_is_reported(planted: Planted):
    planted.replace("main.tf", "    event_source  = module.profiles.event_source\n", "")
    assert propagation_problems(planted.terraform) == [
        "time_sleep.iam_propagation does not wait for module.profiles.event_source"]


def test_planted_trigger_without_its_own_wait_is_reported(planted: Planted):
    planted.replace("modules/function/main.tf", "depends_on = [time_sleep.trigger_grants, ",
                    "depends_on = [google_project_iam_member.trigger_receiver, ")
    assert propagation_problems(planted.terraform) == [
        "the function's storage trigger must wait for its account's eventReceiver grant to propagate"]


def token_problems(terraform: Path) -> list[str]:
    """Every account Pub/Sub pushes as (ours and Eventarc's transport) lets the Pub/Sub agent mint its tokens."""
    function = load_module(terraform / "modules/function")
    minted = {plain(b.body).get("service_account_id") for b in resources(function, "google_service_account_iam_member")
              if plain(b.body).get("role") == "roles/iam.serviceAccountTokenCreator"
              and plain(b.body).get("member") == "serviceAccount:${var.pubsub_service_agent}"}
    return [f"the Pub/Sub service agent cannot mint tokens for google_service_account.{account}"
            for account in ("push", "trigger") if f"${{google_service_account.{account}[0].name}}" not in minted]


def test_the_pubsub_agent_mints_tokens_for_every_account_it_pushes_as():
    assert token_problems(REPO / "terraform") == []


def test_planted_trigger_account_without_token_grant_is_reported(planted: Planted):
    planted.replace("modules/function/main.tf", "  service_account_id = google_service_account.trigger[0].name\n",
                    "  service_account_id = google_service_account.function.name\n")
    assert token_problems(planted.terraform) == [
        "the Pub/Sub service agent cannot mint tokens for google_service_account.trigger"]


def readiness_problems(terraform: Path) -> list[str]:
    """What waits on a real dependency rather than on time: secrets before the function, TTL before indexes."""
    problems = []
    function = _named(load_module(terraform / "modules/function"), "google_cloudfunctions2_function", "this")
    if "${google_secret_manager_secret_iam_member.function}" not in function.get("depends_on", []):
        problems.append("the function is deployed before it may read the secrets it mounts")
    index = _named(load_module(terraform / "modules/firestore"), "google_firestore_index", "this")
    if "${google_firestore_field.ttl}" not in index.get("depends_on", []):
        problems.append("the Firestore indexes are created together with the new database's first metadata write")
    return problems


def test_functions_and_indexes_wait_for_what_they_need():
    assert readiness_problems(REPO / "terraform") == []


def test_planted_function_before_its_secret_grant_is_reported(planted: Planted):
    planted.replace("modules/function/main.tf", ", google_secret_manager_secret_iam_member.function]", "]")
    assert readiness_problems(planted.terraform) == [
        "the function is deployed before it may read the secrets it mounts"]


def test_planted_indexes_beside_the_first_metadata_write_are_reported(planted: Planted):
    planted.replace("modules/firestore/main.tf", "  depends_on = [google_firestore_field.ttl]\n", "")
    assert readiness_problems(planted.terraform) == [
        "the Firestore indexes are created together with the new database's first metadata write"]
