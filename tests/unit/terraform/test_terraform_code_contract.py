"""What the code does, Terraform allows: derived from the code (``code_paths``), not listed by hand.

- every topic a function's code can publish to is in its ``publishes_to`` (and nothing more);
- every Firestore query the code builds has the index Firestore needs for it in
  ``firestore.tf``. The emulator enforces no indexes, so this is the only place a
  missing one shows before a real project refuses the query with FAILED_PRECONDITION.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from code_paths import CodeGraph, Query, firestore_queries, published_topics
from terraform_support import REPO, Planted, missing_tool
from test_terraform_consistency import root_locals
from test_terraform_evaluation import EVALUATED, REQUIRED, STUB

Index = tuple[frozenset[str], tuple[tuple[str, bool], ...]]  # equality prefix, ordered suffix


@pytest.fixture(scope="module")
def graph() -> CodeGraph:
    return CodeGraph.load()


def publish_problems(terraform: Path, graph: CodeGraph) -> list[str]:
    problems = []
    for name, spec in sorted(root_locals(terraform)["functions"].items()):
        declared, used = set(spec["publishes_to"]), published_topics(graph, name)
        if used - declared:
            problems.append(f"{name} publishes to {sorted(used - declared)} but publishes_to omits it")
        if declared - used:
            problems.append(f"{name} may publish to {sorted(declared - used)} but its code never does")
    return problems


def declared_indexes(terraform: Path, workdir: Path) -> dict[str, list[Index]]:
    """``local.firestore_indexes`` as the real ``terraform`` evaluates it."""
    if shutil.which("terraform") is None:
        missing_tool("the terraform binary is not on PATH (https://developer.hashicorp.com/terraform/install)")
    for name in EVALUATED:
        shutil.copy(terraform / name, workdir / name)
    (workdir / "stub.tf").write_text(STUB, encoding="utf-8")
    result = subprocess.run(["terraform", "console", "-no-color", *REQUIRED], cwd=workdir, capture_output=True,
                            text=True, input="jsonencode(local.firestore_indexes)", check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    indexes: dict[str, list[Index]] = {}
    for index in json.loads(json.loads(result.stdout)).values():
        fields = [(f["field_path"], f["order"] == "DESCENDING") for f in index["fields"]]
        indexes.setdefault(index["collection"], []).append((frozenset(f for f, _ in fields[:-1]), tuple(fields[-1:])))
    return indexes


def served(query: Query, indexes: list[Index]) -> bool:
    """Whether Firestore can serve ``query`` from its automatic single-field indexes and ``indexes``.

    Equalities alone, or one ordered field alone, need nothing declared. Otherwise each
    equality field must lead an index that ends in the query's order; Firestore merges
    such indexes to serve several equalities at once.
    """
    if not query.order or (not query.equalities and len(query.order) == 1):
        return True
    if not query.equalities:
        return (frozenset(), query.order) in indexes
    return all(any(field in prefix and prefix <= query.equalities and suffix == query.order
                   for prefix, suffix in indexes)
               for field in query.equalities)


def index_problems(terraform: Path, workdir: Path, graph: CodeGraph) -> list[str]:
    indexes = declared_indexes(terraform, workdir)
    problems = {f"{query.describe()} ({query.where}) has no composite index in firestore.tf"
                for query in firestore_queries(graph) if not served(query, indexes.get(query.collection, []))}
    return sorted(problems)


@pytest.mark.slow
def test_publishes_to_is_what_the_code_publishes(graph: CodeGraph):
    assert publish_problems(REPO / "terraform", graph) == []


@pytest.mark.slow
def test_the_walk_finds_the_queries_that_need_composite_indexes(graph: CodeGraph):
    shapes = {query.describe() for query in firestore_queries(graph)}
    assert "profilerSessions: _parent and analysis.state and autoCaptured, order createTime desc" in shapes
    assert "machineLearningRuns: _parent and runPhase, order createTime desc" in shapes
    assert "machineLearningRuns: _parent and displayName, order createTime desc" in shapes
    assert "events: function and outcome and type, order firstReceived desc" in shapes
    assert "outbox: no equality, order stagedAt asc" in shapes  # store.query on a parameter named store


# The baseline query written the ways code builds conditions: the walk must see the same shape.
BASELINE = "profilerSessions: _parent and analysis.state and autoCaptured, order createTime desc"
BASELINE_VARIANTS = {
    "local variables": """
def find_baseline(services, session):
    conditions = [Where("analysis.state", "==", AnalysisState.DONE.value)]
    conditions.append(Where("autoCaptured", "==", False))
    newest_first = [OrderBy("createTime", descending=True)]
    return services.sessions.list(parent_of(session.name), conditions, order_by=newest_first).items
""",
    "a helper given conditions": """
def _finished(services, parent, *where):
    return services.sessions.list(parent, where=[Where("analysis.state", "==", AnalysisState.DONE.value), *where],
                                  order_by=[OrderBy("createTime", descending=True)]).items


def find_baseline(services, session):
    return _finished(services, parent_of(session.name), Where("autoCaptured", "==", False))
""",
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", BASELINE_VARIANTS)
def test_the_walk_finds_conditions_held_in_variables_and_passed_to_helpers(graph: CodeGraph, variant: str):
    (qualified,) = (name for name in graph.definitions if name.endswith(".find_baseline"))
    module = graph.owner[qualified]
    source = inspect.getsource(importlib.import_module(module))
    rewritten = source.replace(ast.get_source_segment(source, graph.definitions[qualified]),
                               BASELINE_VARIANTS[variant].strip())
    shapes = {query.describe() for query in firestore_queries(CodeGraph.load({module: rewritten}))}
    assert BASELINE in shapes


@pytest.mark.slow
def test_every_firestore_query_has_its_index(graph: CodeGraph, tmp_path: Path):
    assert index_problems(REPO / "terraform", tmp_path, graph) == []


@pytest.mark.slow
def test_planted_missing_publish_grant_is_reported(planted: Planted, graph: CodeGraph):
    planted.replace("functions.tf", 'publishes_to       = ["analysis-events", "capture-requests"]',
                    'publishes_to       = ["analysis-events"]')
    assert publish_problems(planted.terraform, graph) == [
        "on_alert publishes to ['capture-requests'] but publishes_to omits it"]


@pytest.mark.slow
def test_planted_missing_baseline_index_is_reported(planted: Planted, graph: CodeGraph, tmp_path: Path):
    planted.replace("firestore.tf", '{ field_path = "autoCaptured", order = "ASCENDING" },', "")
    (problem,) = index_problems(planted.terraform, tmp_path, graph)
    assert re.fullmatch(rf"{BASELINE} \(mldiag\.[\w.]+:\d+ find_baseline\) has no composite index in firestore\.tf",
                        problem)


@pytest.mark.slow
def test_planted_missing_index_is_reported(planted: Planted, graph: CodeGraph, tmp_path: Path):
    planted.replace("firestore.tf", '{ field_path = "runPhase", order = "ASCENDING" },', "")
    (problem,) = index_problems(planted.terraform, tmp_path, graph)
    assert re.fullmatch(r"machineLearningRuns: _parent and runPhase, order createTime desc "
                        r"\(mldiag\.entrypoints\.console\.pages:\d+ runs\) has no composite index in firestore\.tf", problem)
