"""Each function's server takes as many requests at once as Cloud Run sends it.

functions-framework serves with ``THREADS`` threads (4 per vCPU when unset), while Cloud Run
sends each instance up to the declared ``max_instance_request_concurrency``: with fewer
threads the rest queue inside the instance, where Cloud Run's autoscaling does not see them.
"""

from __future__ import annotations

from pathlib import Path

from terraform_config import load_module, nested_blocks
from terraform_support import REPO, Planted
from test_terraform_consistency import plain, resources

THREADS = "THREADS = tostring(var.resources.concurrency)"


def thread_problems(terraform: Path) -> list[str]:
    (function,) = resources(load_module(terraform / "modules/function"), "google_cloudfunctions2_function")
    (service,) = [body for kind, body in nested_blocks(function.body) if kind == "service_config"]
    config = plain(service)
    if config.get("max_instance_request_concurrency") != "${var.resources.concurrency}":
        return ["the function's concurrency is not var.resources.concurrency"]
    if THREADS not in str(config.get("environment_variables", "")):
        return ["functions-framework's THREADS is not the function's declared concurrency"]
    return []


def test_every_function_serves_as_many_requests_at_once_as_it_declares():
    assert thread_problems(REPO / "terraform") == []


def test_planted_default_threads_are_reported(planted: Planted):
    planted.replace("modules/function/main.tf", "merge(var.environment, { THREADS = tostring(var.resources.concurrency) })",
                    "var.environment")
    assert thread_problems(planted.terraform) == ["functions-framework's THREADS is not the function's declared concurrency"]


def archive_retention_problems(terraform: Path) -> list[str]:
    """The archive a function was deployed from stays: an aged-out one is uploaded again and redeploys it."""
    build = load_module(terraform / "modules/build")
    (sources,) = [plain(b.body) for b in build if b.kind == "module" and b.labels[0] == "sources"]
    rules = sources.get("lifecycle_rules", [])
    deleting = [rule for rule in rules if isinstance(rule, dict) and rule.get("action", {}).get("type") == "Delete"]
    return ["the sources bucket deletes archives by age, the deployed one included"] if deleting else []


def test_the_deployed_archive_is_never_aged_out():
    assert archive_retention_problems(REPO / "terraform") == []


def test_planted_age_based_deletion_of_archives_is_reported(planted: Planted):
    planted.replace("modules/build/main.tf", "  lifecycle_rules = []\n",
                    '  lifecycle_rules = [{ action = { type = "Delete" }, condition = { age = 30 } }]\n')
    assert archive_retention_problems(planted.terraform) == [
        "the sources bucket deletes archives by age, the deployed one included"]
