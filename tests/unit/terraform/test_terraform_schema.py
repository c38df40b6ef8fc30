"""``scripts/check_terraform_schema.py``: the tree is clean, and each kind of defect is caught.

The provider schema comes from ``@cdktf/provider-google``'s ``.jsii`` (see the
script's docstring for the npm command); it is read once per test session.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from check_terraform_schema import DEFAULT_JSII, INSTALL_HINT, Schemas, check_tree, load_schemas, main
from terraform_support import REPO, Planted, missing_tool

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs


@pytest.fixture(scope="session")
def schemas() -> Schemas:
    if not DEFAULT_JSII.is_file():
        missing_tool(f"the provider schema is not installed: {INSTALL_HINT}")
    return load_schemas(DEFAULT_JSII)


def messages(root: Path, schemas: Schemas) -> list[str]:
    return [f"{p.address}: {p.message}" for p in check_tree(root, schemas)]


def test_the_schema_is_google_6_50(schemas: Schemas):
    assert schemas.jsii.provider_version == "6.50.0"
    assert schemas.jsii.package_version == "16.12.1"


def test_the_tree_matches_the_provider_schemas(schemas: Schemas):
    assert messages(REPO / "terraform", schemas) == []


def test_main_explains_a_missing_schema(tmp_path: Path, capsys):
    assert main([str(REPO / "terraform"), "--jsii", str(tmp_path / "absent.jsii")]) == 2
    assert INSTALL_HINT in capsys.readouterr().err


PLANTED = [
    pytest.param(
        "modules/queue/main.tf", 'resource "google_pubsub_topic" "work" {', 'resource "google_pubsub_topics" "work" {',
        ["google_pubsub_topics.work: unknown resource type 'google_pubsub_topics'",
         "locals: reference to undeclared google_pubsub_topic.work",
         "google_pubsub_topic_iam_member.publishers: reference to undeclared google_pubsub_topic.work",
         "output.topic: reference to undeclared google_pubsub_topic.work",
         "output.topic_id: reference to undeclared google_pubsub_topic.work"],
        id="unknown resource type"),
    pytest.param(
        "modules/queue/main.tf", "  enable_message_ordering = true\n", "  enable_ordering = true\n",
        ["google_pubsub_subscription.push: unknown argument 'enable_ordering'"],
        id="unknown argument"),
    pytest.param(
        "modules/queue/main.tf", "  retry_policy {\n", "  retry_policies {\n",
        ["google_pubsub_subscription.push: unknown block 'retry_policies'"],
        id="unknown block"),
    pytest.param(
        "modules/queue/main.tf", '      audience              = each.value.consumer.url\n', '      audiences             = [each.value.consumer.url]\n',
        ["google_pubsub_subscription.push: push_config.oidc_token: unknown argument 'audiences'"],
        id="unknown nested argument"),
    pytest.param(
        "modules/firestore/main.tf", "  collection  = each.value.collection\n", "",
        ["google_firestore_index.this: missing required argument 'collection'"],
        id="missing required argument"),
    pytest.param(
        "modules/xprof-viewer/main.tf", '      image = var.image\n', "",
        ["google_cloud_run_v2_service.viewer: template.containers: missing required argument 'image'"],
        id="missing required nested argument"),
    pytest.param(
        "modules/bucket/main.tf", "        type          = lifecycle_rule.value.action.type\n", "",
        ["google_storage_bucket.this: lifecycle_rule.action: missing required argument 'type'"],
        id="missing required argument in a dynamic block"),
    pytest.param(
        "modules/function/main.tf", "    runtime           = \"python311\"\n", "    runtime           = \"python311\"\n    source_dir        = \"x\"\n",
        ["google_cloudfunctions2_function.this: build_config: unknown argument 'source_dir'"],
        id="unknown argument in a nested block"),
    pytest.param(
        "modules/function/main.tf", '  output_file_mode = "0644"\n', '  output_file_mode = "0644"\n  source_files     = []\n',
        ["data.archive_file.source: unknown argument 'source_files'"],
        id="archive provider (built-in schema)"),
    pytest.param(
        "main.tf", "  region             = var.region\n  prefix             = var.prefix\n  name               = each.key\n",
        "  region             = var.region\n  prefix             = var.prefix\n  function_name      = each.key\n",
        ["module.function: module has no input 'function_name'", "module.function: missing required input 'name'"],
        id="module inputs"),
    pytest.param(
        "outputs.tf", "value       = module.profiles.name", "value       = module.profiles.bucket_name",
        ["output.bucket: module.profiles has no output 'bucket_name'"],
        id="module output reference"),
    pytest.param(
        "modules/function/outputs.tf", "google_cloudfunctions2_function.this.service_config[0].uri",
        "google_cloudfunctions2_function.this.service_config[0].url",
        ["output.url: google_cloudfunctions2_function has no attribute 'url'"],
        id="nested attribute reference"),
    pytest.param(
        "modules/bucket/main.tf", "  force_destroy               = var.force_destroy\n",
        "  force_destroy               = var.destroy_objects\n",
        ["google_storage_bucket.this: reference to undeclared var.destroy_objects"],
        id="undeclared variable"),
]


@pytest.mark.parametrize(("relative", "old", "new", "expected"), PLANTED)
def test_planted_defect_is_reported(schemas: Schemas, planted: Planted, relative: str, old: str, new: str,
                                    expected: list[str]):
    planted.replace(relative, old, new)
    assert messages(planted.terraform, schemas) == expected
