"""``mldiag compare`` on folders: a mistyped folder is named as missing, never taken for a stored session."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mldiag.cli.main import app

UNREADABLE_EXIT = 3


@pytest.fixture
def logdir(tmp_path):
    folder = tmp_path / "logdir-main"
    folder.mkdir()
    return folder


def compare(*args: str):
    return CliRunner().invoke(app, ["compare", *args, "--api-url", "http://127.0.0.1:9"], env={"COLUMNS": "1000"})


def test_a_mistyped_candidate_folder_is_named_as_missing(logdir):
    result = compare(str(logdir), str(logdir.parent / "logdir-mian"))
    assert result.exit_code == UNREADABLE_EXIT, result.output
    assert "logdir-mian" in result.stderr and "does not exist" in result.stderr
    assert "not one of each" not in result.output


def test_two_mistyped_folders_are_not_looked_up_as_sessions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = compare("./logdir-mian", "./logdir-brnach")
    assert result.exit_code == UNREADABLE_EXIT, result.output
    assert "logdir-mian" in result.stderr and "control plane" not in result.output


def test_a_folder_and_a_session_id_are_still_refused_together(logdir):
    result = compare(str(logdir), "s1")
    assert result.exit_code == 2 and "not one of each" in result.output
