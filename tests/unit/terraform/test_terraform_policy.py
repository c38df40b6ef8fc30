"""checkov over ``terraform/``: no failed check, every skip documented, and a planted weakness fails.

checkov pins old versions of common packages, so it lives in a virtualenv of its own
(``.cache/checkov-venv``, see terraform/README.md); a ``checkov`` on PATH also works.
It runs with ``--skip-download``: nothing is fetched from Prisma Cloud.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from terraform_support import REPO, Planted, missing_tool

pytestmark = pytest.mark.slow

SKIP_COMMENT = re.compile(r"checkov:skip=([A-Z0-9_]+)(?::(.*))?")


@pytest.fixture(scope="module")
def checkov() -> str:
    local = REPO / ".cache/checkov-venv/bin/checkov"
    binary = str(local) if local.is_file() else shutil.which("checkov")
    if binary is None:
        missing_tool("checkov is not installed: python3 -m venv .cache/checkov-venv && "
                     ".cache/checkov-venv/bin/pip install checkov==3.3.30")
    return binary


def failed_checks(checkov: str, root: Path) -> list[str]:
    """``check id: resource`` of every failed check; parsing errors count as failures."""
    result = subprocess.run([checkov, "-d", str(root), "--quiet", "--compact", "--skip-download", "-o", "json"],
                            capture_output=True, text=True, check=False, timeout=600)
    reports = json.loads(result.stdout)
    failed = []
    for report in reports if isinstance(reports, list) else [reports]:
        if report["summary"]["parsing_errors"]:
            failed.append(f"{report['check_type']}: {report['summary']['parsing_errors']} file(s) not parsed")
        failed += [f"{check['check_id']}: {check['resource']}" for check in report["results"]["failed_checks"]]
    return failed


def skips(root: Path) -> dict[str, list[str]]:
    """Each skipped check id and the reasons given for it, from the inline comments."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and (path.suffix == ".tf" or path.name == "Dockerfile"):
            for match in SKIP_COMMENT.finditer(path.read_text(encoding="utf-8")):
                found.setdefault(match.group(1), []).append((match.group(2) or "").strip())
    return found


def test_no_check_fails(checkov: str):
    assert failed_checks(checkov, REPO / "terraform") == []


def test_every_skip_gives_its_reason_and_is_listed_in_the_readme():
    readme = (REPO / "terraform/README.md").read_text(encoding="utf-8")
    found = skips(REPO / "terraform")
    assert found, "no checkov skips found: update this test if they were all removed"
    for check, reasons in found.items():
        assert all(reasons), f"{check} is skipped without a reason"
        assert f"`{check}`" in readme, f"{check} is skipped but not listed in terraform/README.md"


def test_planted_public_bucket_fails(checkov: str, planted: Planted):
    planted.replace("modules/bucket/main.tf", 'public_access_prevention    = "enforced"',
                    'public_access_prevention    = "inherited"')
    failed = failed_checks(checkov, planted.terraform)
    assert failed and all(item.startswith("CKV_GCP_114: ") for item in failed), failed
