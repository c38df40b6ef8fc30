"""No data source reads a Google API at plan time before the apply has enabled that API.

On a fresh project, Cloud Resource Manager, Cloud Storage and the rest are enabled by
``google_project_service.enabled``; a data source read before that fails the very first
plan (with ADC whose quota project is that project). Every Google data source of the root
module, and every module call whose module reads one, must therefore wait for the APIs,
directly or through what it depends on: Terraform then defers the read to apply time when
the APIs are still to be enabled.
"""

from __future__ import annotations

from pathlib import Path

from terraform_config import Block, load_module, local_module_source
from terraform_support import REPO, Planted
from test_terraform_consistency import plain

APIS = "google_project_service.enabled"


def _depends_on(block: Block) -> set[str]:
    return {d.removeprefix("${").removesuffix("}") for d in plain(block.body).get("depends_on", [])}


def _reads_google(directory: Path, seen: frozenset[Path] = frozenset()) -> bool:
    blocks = load_module(directory)
    if any(b.kind == "data" and b.labels[0].startswith("google_") for b in blocks):
        return True
    children = [local_module_source(b) for b in blocks if b.kind == "module"]
    return any(_reads_google(child, seen | {directory}) for child in children if child and child not in seen)


def plan_read_problems(terraform: Path) -> list[str]:
    root = load_module(terraform)
    waits = {b.address: _depends_on(b) for b in root if b.kind in {"resource", "data", "module"}}

    def waits_for_apis(address: str, seen: frozenset[str] = frozenset()) -> bool:
        direct = waits.get(address, set())
        return APIS in direct or any(waits_for_apis(d, seen | {address}) for d in direct - seen)

    problems = []
    for block in root:
        google_read = (block.kind == "data" and block.labels[0].startswith("google_")) or (
            block.kind == "module" and (source := local_module_source(block)) is not None and _reads_google(source))
        if google_read and not waits_for_apis(block.address):
            problems.append(f"{block.address} reads a Google API at plan time before {APIS}")
    return problems


def test_nothing_reads_an_api_at_plan_time_before_it_is_enabled():
    assert plan_read_problems(REPO / "terraform") == []


def test_planted_project_read_before_the_apis_is_reported(planted: Planted):
    planted.replace("main.tf", "  project_id = var.project_id\n  depends_on = [google_project_service.enabled]\n",
                    "  project_id = var.project_id\n")
    assert plan_read_problems(planted.terraform) == [
        f"data.google_project.this reads a Google API at plan time before {APIS}"]


def test_planted_module_reading_the_storage_agent_before_the_apis_is_reported(planted: Planted):
    planted.replace("main.tf", "  iam                        = local.bucket_grants\n  labels                     = local.labels\n"
                    "  depends_on                 = [google_project_service.enabled]\n",
                    "  iam                        = local.bucket_grants\n  labels                     = local.labels\n")
    assert plan_read_problems(planted.terraform) == [
        f"module.profiles reads a Google API at plan time before {APIS}"]
