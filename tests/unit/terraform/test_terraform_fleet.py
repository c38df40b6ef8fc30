"""The fleet table in BigQuery: fed by the analysis-events records only, written and read with least privilege.

Read with python-hcl2 (no provider runs here), ``fleet.tf`` must:

- enable BigQuery, and keep ``fleet_records`` partitioned by day on ``analyzed_at``;
- subscribe ``analysis-events`` with a BigQuery subscription whose filter takes exactly the
  messages the analysis publishes as records (the attribute name and value are checked against
  what :func:`mldiag.domain.messages.fleet_record_message` makes), writing through the table's schema
  and dropping fields the table lacks, dead-lettering to the topic's own dead-letter topic;
- let the Pub/Sub agent write on the dataset only, and create the subscription only after that
  grant has had time to propagate;
- let the control plane read the dataset and run query jobs, and tell every function the dataset.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from terraform_config import Block, load_module, local_values
from terraform_support import REPO, Planted
from test_terraform_consistency import plain, resources

from mldiag.config import ANALYSIS_EVENTS
from mldiag.domain.fleet import TABLE
from mldiag.domain.messages import fleet_record_message

sys.path.insert(0, str(REPO / "tests" / "unit" / "fleet"))
from fleet_support import record  # noqa: E402

FILTER = re.compile(r'^attributes\."([\w.-]+)" = "([^"]+)"$')
WRITER_ROLE, READER_ROLE, JOBS_ROLE = "roles/bigquery.dataEditor", "roles/bigquery.dataViewer", "roles/bigquery.jobUser"
PUBSUB_AGENT = "serviceAccount:${local.service_agents.pubsub}"
CONTROL_PLANE = "${module.function[local.fleet_reader].service_account_member}"


def published_record_attributes() -> dict[str, str]:
    """The attributes the analysis publishes a fleet record with."""
    message = fleet_record_message(record(), "//mldiag/projects/p/locations/l")
    assert message.topic == ANALYSIS_EVENTS
    return dict(message.attributes)


def _one(blocks: list[Block], type_name: str, name: str) -> dict[str, Any]:
    found = [plain(b.body) for b in resources(blocks, type_name) if b.labels[1] == name]
    return found[0] if found else {}


def _resolved(text: str, values: dict[str, Any]) -> str:
    """``text`` with the locals that are plain strings written out (``${local.x}`` and ``[local.x]``)."""
    def value(match: re.Match) -> str:
        found = values.get(match.group(2))
        return found if isinstance(found, str) and "${" not in found else match.group(0)
    text = re.sub(r"(\$\{)local\.(\w+)\}", value, text)
    return re.sub(r"(\b)local\.(\w+)\b", value, text)


def fleet_problems(terraform: Path) -> list[str]:
    blocks = load_module(terraform)
    values = plain(local_values(blocks))
    problems = []
    if "bigquery.googleapis.com" not in values.get("services", []):
        problems.append("bigquery.googleapis.com is not enabled")

    table = _one(blocks, "google_bigquery_table", "fleet_records")
    if table.get("table_id") != TABLE:
        problems.append(f"the table must be named {TABLE} (mldiag.domain.fleet.TABLE)")
    if table.get("schema") != '${file("${path.module}/fleet_schema.json")}':
        problems.append("the table's schema must be read from fleet_schema.json")
    partitioning = table.get("time_partitioning", [{}])[0]
    if (partitioning.get("type"), partitioning.get("field")) != ("DAY", "analyzed_at"):
        problems.append("the table must be partitioned by day on analyzed_at")

    subscription = _one(blocks, "google_pubsub_subscription", "fleet_records")
    if _resolved(subscription.get("topic", ""), values) != f"${{module.queue[{ANALYSIS_EVENTS}].topic_id}}":
        problems.append(f"the fleet subscription must read {ANALYSIS_EVENTS}")
    matched = FILTER.match(_resolved(subscription.get("filter", "").replace('\\"', '"'), values))
    attributes = published_record_attributes()
    if matched is None or attributes.get(matched.group(1)) != matched.group(2):
        problems.append(f"the fleet subscription's filter must take the records the analysis publishes "
                        f"(attributes.\"ce-type\" = \"{attributes['ce-type']}\")")
    config = subscription.get("bigquery_config", [{}])[0]
    if "google_bigquery_table.fleet_records" not in config.get("table", ""):
        problems.append("the fleet subscription must write google_bigquery_table.fleet_records")
    if config.get("use_table_schema") is not True or config.get("drop_unknown_fields") is not True:
        problems.append("the fleet subscription must write through the table's schema and drop unknown fields")
    dead_letter = subscription.get("dead_letter_policy", [{}])[0].get("dead_letter_topic", "")
    if _resolved(dead_letter, values) != f"${{module.queue[{ANALYSIS_EVENTS}].dead_letter_topic_id}}":
        problems.append(f"the fleet subscription must dead-letter to {ANALYSIS_EVENTS}'s dead-letter topic")

    writer = _one(blocks, "google_bigquery_dataset_iam_member", "fleet_writer")
    if (writer.get("role"), writer.get("member")) != (WRITER_ROLE, PUBSUB_AGENT):
        problems.append(f"the Pub/Sub agent must hold {WRITER_ROLE} on the fleet dataset")
    waits = [plain(b.body) for b in resources(blocks, "time_sleep")
             if f"${{time_sleep.{b.labels[1]}}}" in subscription.get("depends_on", [])]
    if not any("google_bigquery_dataset_iam_member.fleet_writer" in str(wait.get("triggers")) for wait in waits):
        problems.append("the fleet subscription must wait for the Pub/Sub agent's grant to propagate")
    project_writers = [plain(b.body) for b in resources(blocks, "google_project_iam_member")
                       if plain(b.body).get("role") == WRITER_ROLE]
    if project_writers:
        problems.append(f"{WRITER_ROLE} is granted on the project; grant it on the fleet dataset")

    reader = _one(blocks, "google_bigquery_dataset_iam_member", "fleet_reader")
    jobs = _one(blocks, "google_project_iam_member", "fleet_query_jobs")
    if values.get("fleet_reader") != "control_plane" or (reader.get("role"), reader.get("member")) != (
            READER_ROLE, CONTROL_PLANE):
        problems.append(f"the control plane must hold {READER_ROLE} on the fleet dataset")
    if (jobs.get("role"), jobs.get("member")) != (JOBS_ROLE, CONTROL_PLANE):
        problems.append(f"the control plane must hold {JOBS_ROLE} on the project")
    if ("MLDIAG_FLEET_DATASET" not in values.get("fleet_environment", "")
            or "local.fleet_environment" not in str(values.get("environment"))):
        problems.append("the functions' environment must name the fleet dataset (MLDIAG_FLEET_DATASET)")
    return problems


def test_the_fleet_table_is_fed_by_its_records_with_least_privilege():
    assert fleet_problems(REPO / "terraform") == []


def test_the_filter_names_the_attribute_the_analysis_sets():
    assert published_record_attributes()["ce-type"] == "dev.mldiag.analysis.v1.record"


def test_planted_filter_on_the_wrong_attribute_is_reported(planted: Planted):
    planted.replace("fleet.tf", 'attributes.\\"ce-type\\"', 'attributes.\\"type\\"')
    assert fleet_problems(planted.terraform) == [
        'the fleet subscription\'s filter must take the records the analysis publishes '
        '(attributes."ce-type" = "dev.mldiag.analysis.v1.record")']


def test_planted_other_record_type_is_reported(planted: Planted):
    planted.replace("fleet.tf", '"dev.mldiag.analysis.v1.record"', '"dev.mldiag.analysis.v1.completed"')
    assert len(fleet_problems(planted.terraform)) == 1


def test_planted_unpartitioned_table_is_reported(planted: Planted):
    planted.replace("fleet.tf", 'field         = "analyzed_at"', 'field         = "session_created_at"')
    assert fleet_problems(planted.terraform) == ["the table must be partitioned by day on analyzed_at"]


def test_planted_inline_schema_is_reported(planted: Planted):
    planted.replace("fleet.tf", 'file("${path.module}/fleet_schema.json")', 'jsonencode([])')
    assert fleet_problems(planted.terraform) == ["the table's schema must be read from fleet_schema.json"]


def test_planted_schema_free_writes_are_reported(planted: Planted):
    planted.replace("fleet.tf", "use_table_schema    = true", "use_table_schema    = false")
    assert fleet_problems(planted.terraform) == [
        "the fleet subscription must write through the table's schema and drop unknown fields"]


def test_planted_project_wide_writer_is_reported(planted: Planted):
    planted.write("terraform/extra.tf", 'resource "google_project_iam_member" "wide" {\n'
                  '  project = var.project_id\n  role    = "roles/bigquery.dataEditor"\n'
                  '  member  = "serviceAccount:${local.service_agents.pubsub}"\n}\n')
    assert fleet_problems(planted.terraform) == [
        "roles/bigquery.dataEditor is granted on the project; grant it on the fleet dataset"]


def test_planted_subscription_that_does_not_wait_for_its_grant_is_reported(planted: Planted):
    planted.replace("fleet.tf", "  depends_on = [time_sleep.fleet_writer_propagation]\n", "")
    assert fleet_problems(planted.terraform) == [
        "the fleet subscription must wait for the Pub/Sub agent's grant to propagate"]


def test_planted_missing_dataset_environment_is_reported(planted: Planted):
    planted.replace("main.tf", "}, local.fleet_environment)", "})")
    assert fleet_problems(planted.terraform) == [
        "the functions' environment must name the fleet dataset (MLDIAG_FLEET_DATASET)"]
