"""Every Terraform module documents itself: typed, described variables, described outputs, and a
README whose inputs and outputs tables match its code; examples/minimal asks for two values."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from terraform_config import load_module, module_dirs
from terraform_docs import main, readmes
from terraform_support import REPO, Planted


def undocumented(root: Path) -> list[str]:
    problems = []
    for directory in module_dirs(root):
        for block in load_module(directory):
            where = f"{directory.relative_to(root)}: {block.address}"
            if block.kind == "variable":
                problems += [f"{where} has no {field}" for field in ("type", "description") if field not in block.body]
            elif block.kind == "output" and "description" not in block.body:
                problems.append(f"{where} has no description")
    return problems


def required_inputs(directory: Path) -> set[str]:
    return {b.labels[0] for b in load_module(directory) if b.kind == "variable" and "default" not in b.body}


def test_every_variable_is_typed_and_described_and_every_output_described():
    assert undocumented(REPO / "terraform") == []


def test_planted_undescribed_variable_is_reported(planted: Planted):
    planted.write("terraform/modules/queue/extra.tf", 'variable "ordering" {\n  type = bool\n}\n')
    assert undocumented(planted.terraform) == ["modules/queue: variable.ordering has no description"]


def test_the_minimal_example_needs_only_the_project_and_the_region():
    assert required_inputs(REPO / "terraform") == {"project_id", "region"}
    assert required_inputs(REPO / "terraform/examples/minimal") == {"project_id", "region"}


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


RESTRICTED = "examples/org-policy-restricted"
PUBLIC_PRINCIPALS = ("allUsers", "allAuthenticatedUsers")


def public_grants(example: Path) -> list[str]:
    """What would make an example need a public principal, which domain-restricted sharing refuses."""
    problems = [f"{path.name} names {principal}" for path in sorted(example.glob("*.tf"))
                for principal in PUBLIC_PRINCIPALS if principal in path.read_text(encoding="utf-8")]
    call = next(b for b in load_module(example) if b.kind == "module" and b.labels[0] == "mldiag")
    control_plane = call.body.get("control_plane", {})
    if str(control_plane.get("allow_unauthenticated", "false")).lower() != "false":
        problems.append("control_plane.allow_unauthenticated would grant allUsers the invoker role")
    return problems


def test_the_org_policy_example_grants_nothing_public():
    assert public_grants(REPO / "terraform" / RESTRICTED) == []


def test_planted_public_invoker_in_the_org_policy_example_is_reported(planted: Planted):
    planted.replace(f"{RESTRICTED}/main.tf", "allow_unauthenticated = false", "allow_unauthenticated = true")
    assert public_grants(planted.terraform / RESTRICTED) == [
        "control_plane.allow_unauthenticated would grant allUsers the invoker role"]


DOMAIN_RESTRICTION = "iam.allowedPolicyMemberDomains"
EXAMPLES = ("minimal", "org-policy-restricted", "production")


def unauthenticated_problems(example: Path) -> list[str]:
    """An example admits callers without an ID token only for the capability URL, and says what refuses it."""
    call = next(b for b in load_module(example) if b.kind == "module" and b.labels[0] == "mldiag")
    allowed = str(call.body.get("control_plane", {}).get("allow_unauthenticated", "false")).lower()
    if allowed == "false":
        return []
    problems = []
    if allowed != '${var.sdk_secret != ""}' or call.body.get("sdk_secret") != "${var.sdk_secret}":
        problems.append("control_plane.allow_unauthenticated is set without the sdk_secret whose routes it opens")
    if DOMAIN_RESTRICTION not in (example / "README.md").read_text(encoding="utf-8"):
        problems.append(f"README.md does not say that {DOMAIN_RESTRICTION} refuses the allUsers invoker")
    return problems


def test_examples_admit_unauthenticated_callers_only_for_the_capability_url():
    assert {name: unauthenticated_problems(REPO / "terraform/examples" / name) for name in EXAMPLES} == {
        name: [] for name in EXAMPLES}


def test_planted_unconditional_public_invoker_is_reported(planted: Planted):
    planted.replace("examples/production/main.tf", 'allow_unauthenticated = var.sdk_secret != ""',
                    "allow_unauthenticated = true")
    assert unauthenticated_problems(planted.terraform / "examples/production") == [
        "control_plane.allow_unauthenticated is set without the sdk_secret whose routes it opens"]


def test_planted_public_invoker_without_the_org_policy_note_is_reported(planted: Planted):
    planted.replace("examples/production/README.md", f"(`constraints/{DOMAIN_RESTRICTION}`,", "(")
    assert unauthenticated_problems(planted.terraform / "examples/production") == [
        f"README.md does not say that {DOMAIN_RESTRICTION} refuses the allUsers invoker"]


APPLY_CHECK = "scripts/terraform_apply_check.sh"


def apply_check_problems(root: Path) -> list[str]:
    """The apply check is valid bash and reads only outputs every example declares."""
    script = root / APPLY_CHECK
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    problems = [f"{APPLY_CHECK} is not valid bash: {checked.stderr.strip()}"] if checked.returncode else []
    read = set(re.findall(r"output -raw (\w+)", script.read_text(encoding="utf-8")))
    for example in EXAMPLES:
        declared = {b.labels[0] for b in load_module(root / "terraform/examples" / example) if b.kind == "output"}
        problems += [f"examples/{example} has no output {name}" for name in sorted(read - declared)]
    return problems


def test_the_apply_check_reads_what_the_examples_output():
    assert apply_check_problems(REPO) == []


def test_planted_output_the_examples_lack_is_reported(planted: Planted):
    script = (REPO / APPLY_CHECK).read_text(encoding="utf-8")
    planted.write(APPLY_CHECK, script.replace("output -raw agent_configmap", "output -raw agent_config"))
    assert apply_check_problems(planted.root) == [f"examples/{name} has no output agent_config" for name in EXAMPLES]
