"""Names that carry markup or instructions stay data: kept verbatim as evidence, never obeyed, never rendered."""

from __future__ import annotations

import json

import pytest
from analysis_support import facts, strings_in, xplane
from typer.testing import CliRunner

from mldiag.cli.analyze import _print_text
from mldiag.cli.main import app
from mldiag.domain import FindingCategory, HealthStatus, Priority

pytestmark = pytest.mark.slow  # real analyses, servers or Terraform runs

HOSTILE = tuple(facts("hostile")["hostile_strings_in_event_names"])


def test_the_fixture_really_carries_the_hostile_names():
    assert all(facts("hostile")["hostile_strings_in_event_names"][text] for text in HOSTILE)


def test_an_instruction_in_a_name_does_not_change_the_verdict(analysis_of):
    analysis = analysis_of("hostile")
    assert analysis.status is HealthStatus.NEEDS_ATTENTION
    (finding,) = [f for f in analysis.findings if f.category is FindingCategory.INPUT_BOUND]
    assert finding.priority is Priority.P0
    assert json.dumps(HOSTILE[2]) in " ".join(finding.evidence)  # quoted as the host work it is


def test_hostile_names_survive_verbatim_as_data_and_only_as_evidence(analysis_of):
    analysis = analysis_of("hostile")
    values = list(strings_in(json.loads(json.dumps(analysis.to_json_dict()))))
    for text in HOSTILE:
        assert any(text in value for value in values), text
    evidence = " ".join(e for f in analysis.findings for e in f.evidence)
    assert HOSTILE[0] in evidence and HOSTILE[2] in evidence
    assert any(HOSTILE[1] in a.name for a in analysis.hosts[0].dispatched)
    for text in HOSTILE:
        assert text not in analysis.summary
        assert all(text not in f.title and text not in f.what and text not in f.fix for f in analysis.findings)


def test_the_text_report_prints_names_literally(tmp_path):
    result = CliRunner().invoke(app, ["analyze", str(xplane("hostile")), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for text in (HOSTILE[0], HOSTILE[2]):
        assert text in result.stdout
    written = json.loads((tmp_path / "analysis.json").read_text())
    assert HOSTILE[1] in json.dumps(written["hosts"], ensure_ascii=False)


def test_console_markup_in_a_name_is_not_interpreted(capsys):
    markup = "[bold red]owned[/bold red] [link=https://example.com]click[/link]"
    report = {
        "status": "NEEDS_ATTENTION", "summary": "s.", "metrics": {},
        "findings": [{"priority": "P0", "category": "other", "title": "t", "what": "w",
                      "evidence": [json.dumps(markup)], "impact": "i", "fix": "f"}],
        "tools": [{"name": "get_hosts", "status": "ok", "seconds": 0.0, "reason": markup}],
    }
    _print_text(report)
    printed = capsys.readouterr().out
    assert markup in printed
