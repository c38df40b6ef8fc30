"""``scripts/check_terraform_schema.py`` run as a person runs it: its entry point loads the provider schema
itself, reports a defect planted in a copy of ``terraform/`` and exits 1."""

from __future__ import annotations

from check_terraform_schema import DEFAULT_JSII, INSTALL_HINT, main
from terraform_support import Planted, missing_tool


def test_main_reports_a_defect_and_exits_one(planted: Planted, capsys):
    if not DEFAULT_JSII.is_file():
        missing_tool(f"the provider schema is not installed: {INSTALL_HINT}")
    planted.replace("modules/bucket/main.tf", "  uniform_bucket_level_access = true\n",
                    "  uniform_bucket_level_access = true\n  uniform_access = true\n")
    assert main([str(planted.terraform)]) == 1
    assert "google_storage_bucket.this: unknown argument 'uniform_access'" in capsys.readouterr().out
