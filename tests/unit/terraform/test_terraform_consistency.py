"""``terraform/`` agrees with the code it deploys, and keeps its least-privilege rules.

Each ``*_problems`` function reads a tree (the real one, or a planted copy) with
python-hcl2 and returns what is wrong, one sentence per problem:

- functions: every ``functions/<name>/`` is deployed exactly once, by the one
  function module, with entry point ``<name>`` defined in its ``main.py``, and
  scales to zero;
- subscriptions: every push and BigQuery subscription dead-letters, backs off
  exponentially and never expires; the only pull subscription holds what the
  recorder refused;
- service accounts: every function runs as an account of its own;
- roles: no primitive role anywhere, and project-level grants only for roles no
  narrower resource can hold;
- topics: the names and consumers match ``mldiag.config``,
  ``mldiag.entrypoints.handlers.TOPIC_SUBSCRIBERS`` and the devstack;
- requirements: the generated requirements.txt mirrors pyproject.toml.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from terraform_config import Block, literal, load_module, local_values, module_dirs, unquote, walk_strings
from terraform_support import REPO, Planted

from mldiag import config
from mldiag.local.devstack_host import BUCKET_TRIGGERED
from mldiag.config import TOPIC_SUBSCRIBERS

FUNCTION_MODULE = "./modules/function"
PRIMITIVE_ROLE = re.compile(r"roles/(owner|editor|viewer)(?![\w.])")
# The longest prefix var.prefix allows; the suffix of each trigger's invoker account.
MAX_PREFIX, MAX_ACCOUNT_ID = 12, 30
INVOKER_SUFFIX = {"http": "", "storage": "-trigger", "pubsub": "-push"}
# Roles granted on the project, each because no narrower resource can hold it.
PROJECT_LEVEL_ROLES = {
    "roles/datastore.user": "Firestore has no per-database IAM; the grant carries a condition on the database",
    "roles/aiplatform.user": "Vertex AI model access is granted per project (analysis only)",
    "roles/bigquery.jobUser": "BigQuery runs query jobs per project; what they read is granted on the fleet dataset",
    "roles/eventarc.eventReceiver": "Eventarc triggers receive events per project",
    "roles/pubsub.publisher": "Eventarc names the storage trigger's transport topic itself",
    "roles/logging.logWriter": "Cloud Logging writers are granted per project (the build account)",
    "roles/storage.objectViewer": "the build reads gcf-v2-sources-*, which Cloud Functions creates on first deploy",
}
# Project-level grants of these must carry an IAM condition naming the one resource meant.
CONDITIONED_PROJECT_ROLES = {"roles/storage.objectViewer"}


VERTEX_ROLE, ANALYSIS = "roles/aiplatform.user", "analyze_session"


def plain(value: Any) -> Any:
    """A python-hcl2 value with strings unquoted (expressions stay ``${...}``) and block markers dropped."""
    if isinstance(value, dict):
        return {unquote(key): plain(item) for key, item in value.items() if not key.startswith("__")}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, str):
        return unquote(value)
    return value


def all_blocks(terraform: Path) -> list[Block]:
    return [block for directory in module_dirs(terraform) for block in load_module(directory)]


def resources(blocks: list[Block], type_name: str) -> list[Block]:
    return [b for b in blocks if b.kind == "resource" and b.labels[0] == type_name]


def root_locals(terraform: Path) -> dict[str, Any]:
    return plain(local_values(load_module(terraform)))


def landed_functions(root: Path) -> set[str]:
    return {path.name for path in (root / "functions").iterdir() if path.is_dir() and not path.name.startswith("_")}


def defines_function(main: Path, name: str) -> bool:
    tree = ast.parse(main.read_text(encoding="utf-8"), filename=str(main))
    return any(isinstance(node, ast.FunctionDef) and node.name == name for node in tree.body)


# --- the checks ---------------------------------------------------------------------------------

def function_problems(root: Path) -> list[str]:
    terraform = root / "terraform"
    problems = []
    functions = root_locals(terraform)["functions"]
    callers = [b for b in load_module(terraform) if b.kind == "module"
               and literal(b.body.get("source")) == FUNCTION_MODULE]
    if len(callers) != 1 or plain(callers[0].body.get("for_each")) != "${local.functions}":
        problems.append(f"exactly one module call of {FUNCTION_MODULE} must deploy local.functions (for_each)")
    deployed = resources(all_blocks(terraform), "google_cloudfunctions2_function")
    if [b.file.parent.name for b in deployed] != ["function"]:
        problems.append("google_cloudfunctions2_function must be declared once, in modules/function only")
    for block in deployed:
        body = plain(block.body)
        if body.get("build_config", [{}])[0].get("entry_point") != "${var.name}":
            problems.append("the function's entry point must be var.name (the directory name)")
        if body.get("service_config", [{}])[0].get("min_instance_count") != 0:
            problems.append("functions must scale to zero (min_instance_count = 0)")
    function_dir = root_locals(terraform / "modules/function").get("function_dir")
    if function_dir != "${var.source_root}/functions/${var.name}":
        problems.append("the function module must package functions/<name>")
    for name in sorted(landed_functions(root) - set(functions)):
        problems.append(f"functions/{name} is not deployed: add it to local.functions in terraform/functions.tf")
    for name in sorted(landed_functions(root) & set(functions)):
        main = root / "functions" / name / "main.py"
        if not main.is_file():
            problems.append(f"functions/{name} has no main.py")
        elif not defines_function(main, name):
            problems.append(f"functions/{name}/main.py does not define the entry point {name}()")
    return problems


def subscription_problems(terraform: Path) -> list[str]:
    problems = []
    for block in resources(all_blocks(terraform), "google_pubsub_subscription"):
        body = plain(block.body)
        where = f"{block.file.relative_to(terraform)}: {block.address}"
        if body.get("expiration_policy", [{}])[0].get("ttl") != "":
            problems.append(f"{where} may expire for inactivity (set expiration_policy.ttl = \"\")")
        delivers = "push_config" in body or "bigquery_config" in body
        if not delivers:
            if body.get("topic") != "${google_pubsub_topic.unrecorded_dead_letters.id}":
                problems.append(f"{where} is a pull subscription; only the unrecorded dead letters are held that way")
            continue
        policy = body.get("dead_letter_policy", [{}])[0]
        if not policy.get("dead_letter_topic") or not policy.get("max_delivery_attempts"):
            problems.append(f"{where} has no dead-letter policy")
        retry = body.get("retry_policy", [{}])[0]
        if not retry.get("minimum_backoff") or not retry.get("maximum_backoff"):
            problems.append(f"{where} has no exponential backoff (retry_policy)")
        if "push_config" in body and not body["push_config"][0].get("oidc_token"):
            problems.append(f"{where} pushes without an OIDC token")
    return problems


def service_account_problems(terraform: Path) -> list[str]:
    problems = []
    module = load_module(terraform / "modules/function")
    function = plain(resources(module, "google_cloudfunctions2_function")[0].body)
    if function["service_config"][0].get("service_account_email") != "${google_service_account.function.email}":
        problems.append("the function must run as the module's own google_service_account.function")
    accounts = {b.labels[1]: plain(b.body) for b in resources(module, "google_service_account")}
    own = accounts.get("function", {})
    if "count" in own or "for_each" in own or "${var.service_account_id}" not in str(own.get("account_id")):
        problems.append("google_service_account.function must be one account named after var.service_account_id")
    ids: dict[str, str] = {}
    for name, spec in root_locals(terraform)["functions"].items():
        account = spec["service_account_id"]
        if account in ids:
            problems.append(f"{name} and {ids[account]} share the service account id {account!r}")
        ids[account] = name
        if MAX_PREFIX + 1 + len(account) + len(INVOKER_SUFFIX[spec["trigger"]]) > MAX_ACCOUNT_ID:
            problems.append(f"{name}: service account id {account!r} is too long for a {MAX_PREFIX}-character prefix")
    for other in ("build", "xprof"):  # the build and viewer modules' accounts
        if other in ids:
            problems.append(f"{ids[other]}'s service account id {other!r} is taken by another module")
    return problems


def role_problems(terraform: Path) -> list[str]:
    problems = []
    for block in all_blocks(terraform):
        if block.kind == "variable":  # their validations name the primitive roles they refuse
            continue
        where = f"{block.file.relative_to(terraform)}: {block.address}"
        if block.kind == "resource" and block.labels[0] in ("google_project_iam_binding", "google_project_iam_policy"):
            problems.append(f"{where}: authoritative project IAM would remove grants it does not list")
        for text in walk_strings(block.body):
            if PRIMITIVE_ROLE.search(text):
                problems.append(f"{where}: primitive role in {unquote(text)}")
        if block.kind == "resource" and block.labels[0] == "google_project_iam_member":
            role = literal(block.body.get("role"))
            if role is not None and role not in PROJECT_LEVEL_ROLES:
                problems.append(f"{where}: {role} granted on the project; grant it on the resource")
            elif role in CONDITIONED_PROJECT_ROLES and "condition" not in block.body:
                problems.append(f"{where}: {role} granted on the whole project; add a condition naming the resource")
    for name, spec in root_locals(terraform)["functions"].items():
        for role in spec["project_roles"]:
            if role not in PROJECT_LEVEL_ROLES or role in CONDITIONED_PROJECT_ROLES:
                problems.append(f"{name}: {role} granted on the project; grant it on the resource")
            elif role == VERTEX_ROLE and name != ANALYSIS:
                problems.append(f"{name}: {VERTEX_ROLE} is for {ANALYSIS} only")
    return problems


def topic_problems(root: Path) -> list[str]:
    terraform = root / "terraform"
    locals_ = root_locals(terraform)
    consumers: dict[str, str] = locals_["queue_consumers"]
    recorder, suffix = locals_["dead_letter_recorder"], locals_["dead_letter_suffix"]
    functions = locals_["functions"]
    problems = []
    if set(consumers) != set(config.TOPICS):
        problems.append(f"work topics {sorted(consumers)} differ from mldiag.config.TOPICS {sorted(config.TOPICS)}")
    if suffix != config.DEAD_LETTER_SUFFIX:
        problems.append(f"dead-letter suffix {suffix!r} differs from mldiag.config ({config.DEAD_LETTER_SUFFIX!r})")
    if locals_["unrecorded_dead_letters"] in {*config.TOPICS, config.BUCKET_NOTIFICATIONS}:
        problems.append("the unrecorded dead-letter topic reuses a work topic's name")
    deployed = {**consumers, **{topic + suffix: recorder for topic in consumers}}
    landed = landed_functions(root)
    for topic, function in TOPIC_SUBSCRIBERS.items():
        if deployed.get(topic) != function:
            problems.append(f"the code pushes {topic} to {function}; Terraform to {deployed.get(topic)}")
    for topic, function in deployed.items():
        if function in landed and TOPIC_SUBSCRIBERS.get(topic) != function:
            problems.append(f"Terraform pushes {topic} to {function}, which mldiag.entrypoints.handlers does not list")
    for topic, function in deployed.items():
        if functions.get(function, {}).get("trigger") != "pubsub":
            problems.append(f"{function} consumes {topic} but is not a pubsub-triggered function")
    storage = {name for name, spec in functions.items() if spec["trigger"] == "storage"}
    if storage != set(BUCKET_TRIGGERED):
        problems.append(f"bucket-triggered functions {sorted(storage)} differ from the devstack's {sorted(BUCKET_TRIGGERED)}")
    queue = root_locals(terraform / "modules/queue")
    if queue.get("dead_letter_topic") != "${var.topic}${var.dead_letter_suffix}":
        problems.append("the queue module must name the dead-letter topic <topic><dead_letter_suffix>")
    return problems


def requirement_problems(terraform: Path, pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    locals_ = root_locals(terraform)
    problems = []
    if locals_["runtime_requirements"] != project["dependencies"]:
        problems.append("local.runtime_requirements must equal pyproject.toml [project].dependencies")
    extras = {line for lines in project["optional-dependencies"].values() for line in lines}
    for name, spec in locals_["functions"].items():
        for line in spec["extra_requirements"]:
            if line not in extras:
                problems.append(f"{name}: extra requirement {line} is not in a pyproject.toml extra")
    return problems


# --- the real tree --------------------------------------------------------------------------------

def test_every_function_directory_is_deployed_once_with_its_entry_point():
    assert function_problems(REPO) == []


def test_every_push_subscription_dead_letters_and_backs_off():
    assert subscription_problems(REPO / "terraform") == []


def test_every_function_runs_as_its_own_service_account():
    assert service_account_problems(REPO / "terraform") == []


def test_no_primitive_roles_and_project_grants_only_where_unavoidable():
    assert role_problems(REPO / "terraform") == []


def test_topics_match_the_code_and_the_devstack():
    assert topic_problems(REPO) == []


def test_requirements_mirror_pyproject():
    assert requirement_problems(REPO / "terraform") == []


@pytest.mark.parametrize("name", sorted(root_locals(REPO / "terraform")["functions"]))
def test_planned_function_has_landed(name: str):
    if not (REPO / "functions" / name).is_dir():
        pytest.skip(f"functions/{name} has not landed yet (Terraform already deploys it)")
    assert defines_function(REPO / "functions" / name / "main.py", name)


# --- planted errors -------------------------------------------------------------------------------

def test_planted_function_directory_without_a_deployment_is_reported(planted: Planted):
    planted.write("functions/export_traces/main.py", "def export_traces(event):\n    pass\n")
    assert function_problems(planted.root) == [
        "functions/export_traces is not deployed: add it to local.functions in terraform/functions.tf"
    ]


def test_planted_missing_entry_point_is_reported(planted: Planted):
    planted.write("functions/control_plane/main.py", "def handler(request):\n    pass\n")
    assert function_problems(planted.root) == [
        "functions/control_plane/main.py does not define the entry point control_plane()"
    ]


def test_planted_second_function_resource_is_reported(planted: Planted):
    planted.write("terraform/extra.tf", 'resource "google_cloudfunctions2_function" "extra" {\n'
                                        '  name     = "extra"\n  location = "us-central1"\n}\n')
    assert "google_cloudfunctions2_function must be declared once, in modules/function only" in (
        function_problems(planted.root))


def test_planted_minimum_instance_is_reported(planted: Planted):
    planted.replace("modules/function/main.tf", "min_instance_count               = 0",
                    "min_instance_count               = 1")
    assert function_problems(planted.root) == ["functions must scale to zero (min_instance_count = 0)"]


def test_planted_subscription_without_dead_letter_policy_is_reported(planted: Planted):
    planted.replace("modules/queue/main.tf", "  dead_letter_policy {\n"
                    "    dead_letter_topic     = each.value.dead_letter\n"
                    "    max_delivery_attempts = var.delivery.max_delivery_attempts\n  }\n", "")
    assert subscription_problems(planted.terraform) == [
        "modules/queue/main.tf: google_pubsub_subscription.push has no dead-letter policy"
    ]


def test_planted_pull_subscription_on_a_work_topic_is_reported(planted: Planted):
    planted.write("terraform/extra.tf", 'resource "google_pubsub_subscription" "tap" {\n'
                  '  name  = "tap"\n  topic = "analysis-requests"\n'
                  '  expiration_policy {\n    ttl = ""\n  }\n}\n')
    assert subscription_problems(planted.terraform) == [
        "extra.tf: google_pubsub_subscription.tap is a pull subscription; only the unrecorded dead letters are held that way"
    ]


def test_planted_shared_service_account_is_reported(planted: Planted):
    planted.replace("functions.tf", 'service_account_id = "alert"', 'service_account_id = "capture"')
    assert service_account_problems(planted.terraform) == [
        "on_alert and dispatch_capture share the service account id 'capture'"
    ]


def test_planted_function_running_as_another_account_is_reported(planted: Planted):
    planted.replace("modules/function/main.tf",
                    "service_account_email            = google_service_account.function.email",
                    "service_account_email            = var.build.service_account_id")
    assert service_account_problems(planted.terraform) == [
        "the function must run as the module's own google_service_account.function"
    ]


def test_planted_primitive_role_is_reported(planted: Planted):
    planted.replace("functions.tf", 'publishes_to       = ["analysis-events", "capture-requests"]',
                    'publishes_to       = ["analysis-events", "capture-requests"]\n      bucket_roles       = ["roles/editor"]')
    assert role_problems(planted.terraform) == ["functions.tf: locals: primitive role in roles/editor"]


def test_planted_project_level_grant_is_reported(planted: Planted):
    planted.replace("functions.tf", '["roles/aiplatform.user"]', '["roles/aiplatform.user", "roles/storage.admin"]')
    assert role_problems(planted.terraform) == [
        "analyze_session: roles/storage.admin granted on the project; grant it on the resource"
    ]


def workload_grant_problems(terraform: Path) -> list[str]:
    """Workloads' bucket grants carry the condition that keeps them under the profiles prefix."""
    expression = root_locals(terraform).get("workload_objects", {}).get("expression", "")
    workload_grant = re.search(r'"workload \$\{member\} \$\{role\}" => \{(.*?)\}', (terraform / "main.tf").read_text(
        encoding="utf-8"), re.DOTALL)
    bucket_grant = plain(resources(load_module(terraform / "modules/bucket"), "google_storage_bucket_iam_member")[0].body)
    problems = []
    if ("/objects/${var.profiles_prefix}/" not in expression or workload_grant is None
            or "condition = local.workload_objects" not in workload_grant.group(1)):
        problems.append("workloads' bucket grants must be limited to objects under var.profiles_prefix")
    if "condition" not in str(bucket_grant.get("dynamic", "")):
        problems.append("modules/bucket must apply each grant's condition")
    return problems


def test_workloads_reach_only_the_profiles_prefix():
    assert workload_grant_problems(REPO / "terraform") == []


def test_planted_workload_grant_without_condition_is_reported(planted: Planted):
    planted.replace("main.tf", "role = role, member = member, condition = local.workload_objects",
                    "role = role, member = member")
    assert workload_grant_problems(planted.terraform) == [
        "workloads' bucket grants must be limited to objects under var.profiles_prefix"]


def test_planted_unconditioned_project_storage_grant_is_reported(planted: Planted):
    main = planted.terraform / "modules/build/main.tf"
    text = main.read_text(encoding="utf-8")
    start = text.index("\n  condition {")
    main.write_text(text[:start] + text[text.index("\n  }\n", start) + 4:], encoding="utf-8")
    assert role_problems(planted.terraform) == [
        "modules/build/main.tf: google_project_iam_member.build_function_sources: roles/storage.objectViewer"
        " granted on the whole project; add a condition naming the resource"]


def test_planted_vertex_grant_outside_the_analysis_is_reported(planted: Planted):
    planted.replace("functions.tf", 'project_roles      = []\n      sign_as_self       = true',
                    'project_roles      = ["roles/aiplatform.user"]\n      sign_as_self       = true')
    assert role_problems(planted.terraform) == ["control_plane: roles/aiplatform.user is for analyze_session only"]


def test_planted_renamed_topic_is_reported(planted: Planted):
    planted.replace("functions.tf", '"capture-requests"       = "dispatch_capture"',
                    '"capture-request"        = "dispatch_capture"')
    problems = topic_problems(planted.root)
    assert problems[0].startswith("work topics ['analysis-events', 'analysis-requests', 'capture-request', ")
    assert "the code pushes capture-requests-dead-letter to record_dead_letter; Terraform to None" in problems


def test_planted_wrong_consumer_is_reported(planted: Planted):
    planted.replace("functions.tf", '"maintenance-ticks"      = "maintenance"',
                    '"maintenance-ticks"      = "register_session"')
    assert topic_problems(planted.root) == [
        "the code pushes maintenance-ticks to maintenance; Terraform to register_session",
        "Terraform pushes maintenance-ticks to register_session, which mldiag.entrypoints.handlers does not list",
        "register_session consumes maintenance-ticks but is not a pubsub-triggered function",
    ]


def test_planted_requirement_drift_is_reported(planted: Planted):
    planted.replace("functions.tf", '"xprof>=2.24",', '"xprof>=2.20",')
    assert requirement_problems(planted.terraform) == [
        "local.runtime_requirements must equal pyproject.toml [project].dependencies"
    ]


def test_the_workload_environment_points_the_sdk_at_the_node_agents_local_port():
    """The SDK sends no ID token, which Cloud Run's IAM requires: it reaches the API through the node agent."""
    (output,) = [b for b in load_module(REPO / "terraform") if b.kind == "output"
                 and b.labels[0] == "workload_environment"]
    base_url = plain(output.body["value"])["DIAGON_BASE_URL"]
    ports = {re.search(r"--sdk-port[= ](\d+)", (REPO / "scripts/deploy" / name).read_text(encoding="utf-8"))[1]
             for name in ("mldiag-agent-daemonset.yaml", "gce-startup-script.sh")}
    assert ports == {base_url.removeprefix("http://127.0.0.1:")}, (base_url, ports)
