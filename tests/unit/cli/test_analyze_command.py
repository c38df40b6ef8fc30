"""``mldiag analyze`` says where it wrote its report, as a path that works from anywhere."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from mldiag.cli.main import app

PROFILE = next((Path(__file__).resolve().parents[2] / "fixtures" / "profiles" / "compute_bound").rglob(
    "*.xplane.pb"))


def test_without_out_it_names_the_folder_it_wrote_into(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["analyze", str(PROFILE), "--format", "json"], env={"COLUMNS": "1000"})
    assert result.exit_code == 0, result.output
    assert f"Wrote {tmp_path / 'analysis.json'} and {tmp_path / 'summary.html'} " in result.stderr
    assert (tmp_path / "summary.html").is_file()
