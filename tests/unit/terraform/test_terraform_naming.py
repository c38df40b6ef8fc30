"""Two deployments in one project keep apart: every topic, subscription and the database carry the prefix.

The names come from ``naming.tf`` (evaluated in test_terraform_evaluation.py); this reads where
they are used: each Pub/Sub topic and subscription, in the queue module and the root, is named
with the prefix, the functions publish with it (``MLDIAG_TOPIC_PREFIX``), and push URLs keep the
names the code reads the topic from.
"""

from __future__ import annotations

import re
from pathlib import Path

from terraform_config import load_module
from terraform_support import REPO, Planted
from test_terraform_consistency import plain, resources

PUBSUB = ("google_pubsub_topic", "google_pubsub_subscription")
PREFIXES = {"terraform": "${local.name_prefix}", "terraform/modules/queue": "${var.name_prefix}"}


def naming_problems(terraform: Path) -> list[str]:
    problems = []
    for module, prefix in PREFIXES.items():
        blocks = load_module(terraform.parent / module)
        for type_name in PUBSUB:
            for block in resources(blocks, type_name):
                if not str(plain(block.body).get("name", "")).startswith(prefix):
                    problems.append(f"{module}: {block.address} is not named with the deployment's prefix")
        for block in resources(blocks, "google_pubsub_subscription"):
            endpoint = str(plain(block.body).get("push_config", [{}])[0].get("push_endpoint", ""))
            if "name_prefix" in endpoint:
                problems.append(f"{module}: {block.address} pushes to a URL naming the prefixed topic")
    root = load_module(terraform)
    (queue,) = [plain(b.body) for b in root if b.kind == "module" and b.labels[0] == "queue"]
    if queue.get("name_prefix") != "${local.name_prefix}":
        problems.append("module.queue is not given local.name_prefix")
    if not re.search(r"MLDIAG_TOPIC_PREFIX\s*=\s*local\.name_prefix\n", (terraform / "main.tf").read_text(encoding="utf-8")):
        problems.append("the functions do not publish with the prefix (MLDIAG_TOPIC_PREFIX)")
    return problems


def test_every_topic_and_subscription_carries_the_prefix():
    assert naming_problems(REPO / "terraform") == []


def test_planted_bare_topic_name_is_reported(planted: Planted):
    planted.replace("modules/queue/main.tf", 'name                       = "${var.name_prefix}${var.topic}"',
                    "name                       = var.topic")
    assert naming_problems(planted.terraform) == [
        "terraform/modules/queue: google_pubsub_topic.work is not named with the deployment's prefix"]


def test_planted_publisher_without_the_prefix_is_reported(planted: Planted):
    planted.replace("main.tf", "    MLDIAG_TOPIC_PREFIX          = local.name_prefix\n", "")
    assert naming_problems(planted.terraform) == ["the functions do not publish with the prefix (MLDIAG_TOPIC_PREFIX)"]
