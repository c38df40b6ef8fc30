"""Provider constraints claim only what the offline checks verify, and the examples pin it.

The schema check reads the google provider 6.50 (``@cdktf/provider-google`` 16.12.1), so
every module accepts google and google-beta 6.x and no later major, and each example, a
root configuration applied as is, asks for the 6.50 series (``~> 6.50``) and pins the
archive and time providers' major too.
"""

from __future__ import annotations

import re
from pathlib import Path

from terraform_config import load_module, module_dirs
from terraform_support import REPO, Planted
from test_terraform_consistency import plain

VERIFIED_MAJOR, VERIFIED_SERIES = 6, "6.50"
GOOGLE = ("google", "google-beta")


def _excludes_next_major(constraint: str) -> bool:
    upper = re.search(r"<\s*(\d+)(?:\.0)*\b", constraint)
    pessimistic = re.search(r"~>\s*(\d+)\.\d+", constraint)
    return bool((upper and int(upper.group(1)) <= VERIFIED_MAJOR + 1 and int(upper.group(1)) > VERIFIED_MAJOR)
                or (pessimistic and int(pessimistic.group(1)) == VERIFIED_MAJOR))


def version_problems(terraform: Path) -> list[str]:
    problems = []
    for directory in module_dirs(terraform):
        where = directory.relative_to(terraform.parent)
        example = "examples" in directory.parts
        for block in load_module(directory):
            if block.kind != "terraform":
                continue
            for providers in plain(block.body).get("required_providers", []):
                for name, spec in providers.items():
                    constraint = spec.get("version", "")
                    if name in GOOGLE and not _excludes_next_major(constraint):
                        problems.append(f"{where}: {name} {constraint!r} admits a major the checks do not verify")
                    if example and name in GOOGLE and constraint != f"~> {VERIFIED_SERIES}":
                        problems.append(f"{where}: {name} {constraint!r} is not the verified series ~> {VERIFIED_SERIES}")
                    if example and name not in GOOGLE and not constraint.startswith("~>"):
                        problems.append(f"{where}: {name} {constraint!r} admits any later major")
    return problems


def test_provider_constraints_stay_within_what_is_verified():
    assert version_problems(REPO / "terraform") == []


def test_planted_two_major_constraint_is_reported(planted: Planted):
    planted.replace("modules/queue/versions.tf", '">= 6.0, < 7.0"', '">= 6.0, < 8.0"')
    assert version_problems(planted.terraform) == [
        "terraform/modules/queue: google '>= 6.0, < 8.0' admits a major the checks do not verify"]


def test_planted_open_example_constraint_is_reported(planted: Planted):
    planted.replace("examples/minimal/versions.tf", 'version = "~> 0.9"', 'version = ">= 0.9"')
    assert version_problems(planted.terraform) == ["terraform/examples/minimal: time '>= 0.9' admits any later major"]
