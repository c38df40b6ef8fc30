"""The root module's variables and its provider-free locals, evaluated by the real ``terraform``.

``variables.tf``, ``functions.tf`` and ``firestore.tf`` hold no resources, so Terraform can
load them without any provider: copied beside a stub for the one value they take from
``main.tf`` (the control plane URL, which needs the project number), ``terraform console``
evaluates the function table, the per-function sizes with overrides, the Firestore indexes,
and ``terraform plan`` runs every variable validation.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from terraform_support import REPO, missing_tool

EVALUATED = ("variables.tf", "functions.tf", "firestore.tf", "viewer_links.tf", "naming.tf")
STUB = 'locals {\n  control_plane_url = "https://mldiag-control-plane-1.us-central1.run.app"\n}\n'
REQUIRED = ("-var", "project_id=my-project", "-var", "region=us-central1")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    terraform = shutil.which("terraform")
    if terraform is None:
        missing_tool("the terraform binary is not on PATH (https://developer.hashicorp.com/terraform/install)")
    directory = tmp_path_factory.mktemp("evaluation")
    for name in EVALUATED:
        shutil.copy(REPO / "terraform" / name, directory / name)
    (directory / "stub.tf").write_text(STUB, encoding="utf-8")
    return directory


def terraform(workdir: Path, *arguments: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(["terraform", *arguments, "-no-color", *REQUIRED], cwd=workdir, input=stdin,
                          capture_output=True, text=True, check=False, timeout=120)


def value(workdir: Path, expression: str, *variables: str):
    result = terraform(workdir, "console", *variables, stdin=f"jsonencode({expression})")
    assert result.returncode == 0 and not result.stderr.count("Error:"), result.stderr
    return json.loads(json.loads(result.stdout))


@pytest.mark.slow
def test_the_function_table_evaluates(workdir: Path):
    functions = value(workdir, "local.functions")
    assert set(functions) == {"control_plane", "register_session", "analyze_session", "analyze_host",
                              "dispatch_capture", "on_alert", "maintenance", "record_dead_letter",
                              "deliver_notifications"}
    assert functions["analyze_session"]["extra_environment"]["GOOGLE_CLOUD_PROJECT"] == "my-project"
    assert functions["control_plane"]["extra_environment"]["MLDIAG_AUTH_AUDIENCE"].startswith("https://")


GCLOUD_CLIENT = "32555940559.apps.googleusercontent.com"


@pytest.mark.slow
def test_the_analysis_reasons_with_the_model_terraform_names(workdir: Path):
    from mldiag.config import Settings

    environment = value(workdir, "local.functions.analyze_session.extra_environment")
    assert environment["MLDIAG_VERTEX_MODEL"] == Settings().vertex_model
    chosen = value(workdir, "local.functions.analyze_session.extra_environment", "-var", "vertex_model=gemini-x-pro")
    assert Settings.from_env(chosen).vertex_model == "gemini-x-pro"


@pytest.mark.slow
def test_a_persons_gcloud_token_is_accepted_only_behind_the_invoker_check(workdir: Path):
    """Cloud Run admits a person's `gcloud auth print-identity-token` behind IAM; with allUsers nothing checks it first."""
    environment = "local.functions.control_plane.extra_environment"
    assert value(workdir, environment)["MLDIAG_AUTH_OTHER_AUDIENCES"] == GCLOUD_CLIENT
    opened = value(workdir, environment, "-var", 'control_plane={ingress="ALLOW_INTERNAL_ONLY", allow_unauthenticated=true}')
    assert opened["MLDIAG_AUTH_OTHER_AUDIENCES"] == ""


@pytest.mark.slow
def test_notification_secrets_come_from_secret_manager(workdir: Path):
    assert value(workdir, "local.notification_secrets") == {}
    secrets = value(workdir, "local.notification_secrets", "-var",
                    'notifications={webhook_url="https://hooks.example.com/ml", webhook_secret_id="mldiag-webhook",'
                    ' slack_url_secret_id="mldiag-slack"}')
    assert secrets == {"MLDIAG_NOTIFY_WEBHOOK_SECRET": "mldiag-webhook", "MLDIAG_NOTIFY_SLACK_URL": "mldiag-slack"}


@pytest.mark.slow
def test_size_overrides_replace_only_the_fields_given(workdir: Path):
    sizes = value(workdir, "local.function_resources",
                  "-var", 'function_resources={analyze_session={memory="32Gi", cpu="8"}}')
    assert sizes["analyze_session"] == {"memory": "32Gi", "cpu": "8", "timeout_seconds": 540,
                                        "concurrency": 1, "max_instances": 10}
    assert sizes["on_alert"]["memory"] == "512Mi"


@pytest.mark.slow
def test_the_analysis_functions_have_the_vcpus_asked_for(workdir: Path):
    sizes = value(workdir, "local.function_resources")
    assert sizes["analyze_session"]["cpu"] == sizes["analyze_host"]["cpu"] == "4"
    sizes = value(workdir, "local.function_resources", "-var", "analysis_cpu=8",
                  "-var", 'function_resources={analyze_host={cpu="2"}}')
    assert (sizes["analyze_session"]["cpu"], sizes["analyze_host"]["cpu"]) == ("8", "2")
    assert sizes["on_alert"]["cpu"] == "1"


@pytest.mark.slow
def test_the_firestore_indexes_evaluate(workdir: Path):
    indexes = value(workdir, "local.firestore_indexes")
    assert indexes["profilerSessions-by-parent-descending"]["fields"] == [
        {"field_path": "_parent", "order": "ASCENDING"}, {"field_path": "createTime", "order": "DESCENDING"}]
    assert indexes["events-by-outcome"]["fields"][1] == {"field_path": "firstReceived", "order": "DESCENDING"}
    assert indexes["machineLearningRuns-by-display-name"]["fields"] == [
        {"field_path": "displayName", "order": "ASCENDING"}, {"field_path": "createTime", "order": "DESCENDING"}]
    assert len(indexes) == 17


@pytest.mark.parametrize(("variable", "message"), [
    ('function_resources={analyse_session={memory="1Gi"}}', "function_resources keys must be mldiag functions"),
    ("control_plane={allow_unauthenticated=true}", "an open API must not face the internet"),
    ('control_plane={ingress="ALLOW_INTERNAL_AND_GCLB", allow_unauthenticated=true}',
     "an open API must not face the internet"),
    ("function_resources={analyze_session={timeout_seconds=900}}", "event-triggered functions run at most 540 s"),
    ("function_resources={maintenance={timeout_seconds=600}}", "event-triggered functions run at most 540 s"),
    ("workload_members=[\"allUsers\"]", "allUsers and allAuthenticatedUsers are not allowed"),
    ("delivery={max_delivery_attempts=3}", "between 5 and 100"),
    ("prefix=a-very-long-prefix", "prefix is 2-12 lowercase letters"),
    ("kms_key_name=my-key", "kms_key_name must look like"),
    ("maintenance_schedule=* *", "five-field cron expression"),
    ("sdk_secret=too-short", "sdk_secret must be empty or 32 or more"),
    ("iam_propagation_seconds=5", "iam_propagation_seconds must be between 30 and 600"),
    ("vertex_model=Gemini Flash", "vertex_model is a Vertex AI model id"),
    ('xprof_viewer={image="x", browser_url="https://x.example.com/viewer"}', "xprof_viewer.browser_url is empty or"),
    ('fleet={dataset_id="mldiag-fleet"}', "fleet.dataset_id is letters, digits and '_'"),
    ("fleet={partition_expiration_days=0}", "fleet.partition_expiration_days is a whole number of days"),
    ("fleet={partition_expiration_days=1.5}", "fleet.partition_expiration_days is a whole number of days"),
    ('fleet={kms_key_name="my-key"}', "fleet.kms_key_name must look like"),
    ("analysis_cpu=3", "analysis_cpu must be 1, 2, 4, 6 or 8"),
])
@pytest.mark.slow
def test_planted_invalid_variable_is_refused(workdir: Path, variable: str, message: str):
    result = terraform(workdir, "plan", "-input=false", "-lock=false", "-var", variable)
    assert result.returncode == 1
    assert "Error: Invalid value for variable" in result.stderr
    assert message in " ".join(result.stderr.split())


@pytest.mark.slow
def test_valid_variables_plan(workdir: Path):
    result = terraform(workdir, "plan", "-input=false", "-lock=false",
                       "-var", 'function_resources={analyze_session={memory="32Gi"}, control_plane={timeout_seconds=900}}',
                       "-var", 'control_plane={ingress="ALLOW_INTERNAL_ONLY", allow_unauthenticated=true}',
                       "-var", 'workload_members=["serviceAccount:trainer@my-project.iam.gserviceaccount.com"]',
                       "-var", 'fleet={enabled=false, dataset_id="team_fleet", partition_expiration_days=400}')
    assert result.returncode == 0, result.stderr


def retry_window(attempts: int, minimum_s: float = 10, maximum_s: float = 600) -> float:
    """Seconds a message is retried for before its last attempt, with Pub/Sub's exponential backoff."""
    return sum(min(minimum_s * 2 ** step, maximum_s) for step in range(attempts - 1))


@pytest.mark.slow
def test_work_subscriptions_outlast_a_burst_of_their_consumer(workdir: Path):
    """429s from busy instances count as delivery attempts: a burst must not dead-letter what waits."""
    attempts = value(workdir, "local.delivery_attempts")
    sizes = value(workdir, "local.function_resources")
    rounds = value(workdir, "local.burst_rounds")
    for topic, consumer in value(workdir, "local.queue_consumers").items():
        window = rounds * sizes[consumer]["timeout_seconds"]
        assert retry_window(attempts[topic]) >= window > retry_window(attempts[topic] - 1) or attempts[topic] == 5
        assert 5 <= attempts[topic] <= 100
    assert attempts["analysis-requests"] == 15
    assert value(workdir, "local.delivery_attempts", "-var", "delivery={max_delivery_attempts=40}") == {
        topic: 40 for topic in attempts}


@pytest.mark.slow
def test_dashboard_links_lead_where_a_browser_gets_through(workdir: Path):
    """An IAM-only viewer answers a browser 403: links go to the local proxy, or to a signing-in front."""
    assert value(workdir, "local.xprof_viewer_links") == ""
    viewer = 'xprof_viewer={image="xprof:1"'
    assert value(workdir, "local.xprof_viewer_links", "-var", viewer + "}") == "http://localhost:8081"
    fronted = value(workdir, "local.xprof_viewer_links", "-var", viewer + ', browser_url="https://xprof.example.com"}')
    assert fronted == "https://xprof.example.com"


def test_the_functions_hand_out_the_links_a_browser_can_follow():
    main = (REPO / "terraform/main.tf").read_text(encoding="utf-8")
    assert "MLDIAG_XPROF_VIEWER_URL      = local.xprof_viewer_links" in main
    outputs = (REPO / "terraform/outputs.tf").read_text(encoding="utf-8")
    assert "--port ${local.xprof_viewer_proxy_port}" in outputs


@pytest.mark.slow
def test_a_second_deployments_names_carry_its_prefix(workdir: Path):
    from mldiag.config import Settings

    assert value(workdir, "[local.name_prefix, local.firestore_database]") == ["", "mldiag"]
    prefix, database = value(workdir, "[local.name_prefix, local.firestore_database]", "-var", "prefix=team-a")
    assert (prefix, database) == ("team-a-", "team-a")
    assert Settings.from_env({"MLDIAG_TOPIC_PREFIX": prefix}).topic_prefix == "team-a-"


def test_the_queues_take_the_burst_sized_attempts():
    main = (REPO / "terraform/main.tf").read_text(encoding="utf-8")
    assert "delivery   = merge(var.delivery, { max_delivery_attempts = local.delivery_attempts[each.key] })" in main


@pytest.mark.slow
def test_a_public_invoker_on_an_internet_facing_api_plans_only_with_the_sdks_secret(workdir: Path):
    result = terraform(workdir, "plan", "-input=false", "-lock=false", "-var", "sdk_secret=" + "a1" * 32,
                       "-var", "control_plane={allow_unauthenticated=true}")
    assert result.returncode == 0, result.stderr
