"""Every Terraform module has a README whose inputs and outputs tables match its code."""

from __future__ import annotations

from conftest import REPO, Planted
from terraform_config import module_dirs
from terraform_docs import main, readmes


def test_every_module_has_a_generated_readme():
    root = REPO / "terraform"
    assert [d for d in module_dirs(root) if d / "README.md" not in readmes(root)] == []


def test_the_readmes_are_up_to_date(capsys):
    assert main(["--check", str(REPO / "terraform")]) == 0, capsys.readouterr().out


def test_planted_undocumented_variable_is_reported(planted: Planted, capsys):
    planted.write("terraform/modules/queue/extra.tf",
                  'variable "ordering" {\n  description = "x"\n  type        = bool\n}\n')
    assert main(["--check", str(planted.terraform)]) == 1
    assert capsys.readouterr().out.split() == ["out", "of", "date:", str(planted.terraform / "modules/queue/README.md")]
