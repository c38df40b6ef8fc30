"""``terraform fmt -check -recursive terraform/``: the tree is formatted, and a misformatted file fails."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from terraform_support import REPO, Planted, missing_tool


@pytest.fixture(scope="module")
def terraform() -> str:
    binary = shutil.which("terraform")
    if binary is None:
        missing_tool("the terraform binary is not on PATH (https://developer.hashicorp.com/terraform/install)")
    return binary


def fmt_check(terraform: str, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([terraform, "fmt", "-check", "-recursive", "-list=true"], cwd=root,
                          capture_output=True, text=True, check=False, timeout=120)


def test_the_tree_is_formatted(terraform: str):
    result = fmt_check(terraform, REPO / "terraform")
    assert result.returncode == 0, f"run `terraform fmt -recursive terraform/`; unformatted:\n{result.stdout}"


def test_planted_misformatted_file_fails(terraform: str, planted: Planted):
    planted.replace("modules/queue/main.tf", '  project                    = var.project_id\n  name                       = "${var.name_prefix}${var.topic}"\n',
                    '  project = var.project_id\n  name                       = "${var.name_prefix}${var.topic}"\n')
    result = fmt_check(terraform, planted.terraform)
    assert result.returncode == 3
    assert result.stdout.split() == ["modules/queue/main.tf"]
