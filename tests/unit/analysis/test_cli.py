"""``mldiag analyze``: inputs it accepts, what it writes, and the one-line exit 3 for anything unreadable."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from analysis_support import PROFILES, facts, xplane
from typer.testing import CliRunner

from mldiag.analysis import MANAGED_TOOLS
from mldiag.cli.main import app

runner = CliRunner()


def _analyze(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, ["analyze", *args], env=env)


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _logdir_copy(tmp_path: Path, name: str) -> Path:
    logdir = tmp_path / "logdir"
    shutil.copytree(PROFILES / name, logdir)
    return logdir


@pytest.mark.slow
def test_a_logdir_is_analysed_and_left_byte_for_byte_unchanged(tmp_path):
    logdir = _logdir_copy(tmp_path, "input_bound")
    before = _tree(logdir)
    logdir.chmod(0o555)  # nothing may need to write next to the user's profile
    try:
        result = _analyze(str(logdir), "--out", str(tmp_path / "out"), "--format", "json")
    finally:
        logdir.chmod(0o755)
    assert result.exit_code == 0, result.output
    assert _tree(logdir) == before
    written = json.loads((tmp_path / "out" / "analysis.json").read_text())
    assert json.loads(result.stdout) == written
    assert written["status"] == "NEEDS_ATTENTION"
    assert written["metrics"]["step_time_ms"] == pytest.approx(facts("input_bound")["step_ms_from_markers"]["mean"],
                                                               rel=0.05)
    assert [t["name"] for t in written["tools"]] == list(MANAGED_TOOLS)
    assert all(t["status"] in ("ok", "no_data", "error") and t["seconds"] >= 0 for t in written["tools"])
    assert written["hosts"][0]["host"] == "fixture-host" and 1 <= len(written["followups"]) <= 4
    assert (tmp_path / "out" / "summary.html").is_file()
    assert {"summary", "findings", "metrics"} <= written.keys()


@pytest.mark.slow
def test_a_session_folder_and_a_single_file_give_the_same_diagnosis(tmp_path):
    by_file = _analyze(str(xplane("compute_bound")), "--out", str(tmp_path / "a"), "--format", "json")
    by_folder = _analyze(str(xplane("compute_bound").parent), "--out", str(tmp_path / "b"), "--format", "json")
    assert by_file.exit_code == by_folder.exit_code == 0
    first, second = json.loads(by_file.stdout), json.loads(by_folder.stdout)
    assert first["status"] == second["status"] == "OPTIMAL"
    assert first["metrics"]["step_time_ms"] == second["metrics"]["step_time_ms"]


@pytest.mark.slow
def test_a_logdir_with_several_sessions_means_the_latest(tmp_path):
    logdir = tmp_path / "run"
    for session, name in (("2026_01_01_00_00_00", "compute_bound"), ("2026_02_01_00_00_00", "input_bound")):
        target = logdir / "plugins" / "profile" / session
        target.mkdir(parents=True)
        shutil.copy(xplane(name), target)
    result = _analyze(str(logdir), "--out", str(tmp_path / "out"), "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["profile"]["session"] == "2026_02_01_00_00_00"
    assert "holds 2 sessions" in result.stderr


@pytest.mark.slow
def test_a_gs_uri_is_downloaded_through_the_blob_store(tmp_path):
    data = tmp_path / "data"
    session = data / "buckets" / "profiles" / "run-1" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    shutil.copy(xplane("unfused_small_ops"), session)
    env = {"MLDIAG_BACKEND": "embedded", "MLDIAG_DATA_DIR": str(data)}
    result = _analyze("gs://profiles/run-1", "--out", str(tmp_path / "out"), "--format", "json", env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["profile"]["source"] == "gs://profiles/run-1" and report["profile"]["session"] == "s1"
    assert report["findings"][0]["category"] == "dispatch_overhead"


def test_a_gs_uri_of_gigabytes_of_zeros_is_refused_before_it_is_downloaded(tmp_path):
    data = tmp_path / "data"
    session = data / "buckets" / "profiles" / "run-1" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    with open(session / "host.xplane.pb", "wb") as sparse:
        sparse.truncate(2 << 30)  # 2 GiB that take no disk, until something copies them
    env = {"MLDIAG_BACKEND": "embedded", "MLDIAG_DATA_DIR": str(data), "TMPDIR": str(tmp_path)}
    started = time.monotonic()
    result = _analyze("gs://profiles/run-1", "--out", str(tmp_path / "out"), env=env)
    assert result.exit_code == 3 and time.monotonic() - started < 5
    assert result.stderr.strip() == ("mldiag analyze: gs://profiles/run-1/plugins/profile/s1/host.xplane.pb is not an "
                                     "XSpace profile (.xplane.pb): field 0 at byte 0 is not one of XSpace's")


@pytest.mark.slow
def test_the_text_report_leads_with_status_and_findings(tmp_path):
    result = _analyze(str(xplane("unfused_small_ops")), "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "NEEDS_ATTENTION"
    assert any(line.startswith("P0 [dispatch_overhead] Op-by-op execution") for line in lines)
    assert (tmp_path / "analysis.json").is_file()


def _corrupt(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "host.xplane.pb"
    whole = xplane("input_bound").read_bytes()
    content = {
        "zero_byte": b"",
        "truncated": whole[: len(whole) // 3],
        "not_protobuf": b"<html>this is not a profile</html>\n",
        "corrupt": bytes(b ^ 0x5A for b in whole[:4096]),
    }[kind]
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("kind", ["zero_byte", "truncated", "not_protobuf", "corrupt"])
def test_an_unreadable_file_exits_3_with_one_line(tmp_path, kind):
    path = _corrupt(tmp_path, kind)
    result = _analyze(str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 3
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(f"mldiag analyze: {path} is not an XSpace profile (.xplane.pb): ")
    assert result.stdout == "" and not (tmp_path / "out").exists()


def test_a_file_that_is_no_profile_is_named_as_given(tmp_path, monkeypatch):
    (tmp_path / "random.txt").write_text("hello, this is not a profile\n")
    monkeypatch.chdir(tmp_path)
    result = _analyze("random.txt")
    assert result.exit_code == 3 and result.stdout == ""
    assert result.stderr == ("mldiag analyze: random.txt is not an XSpace profile (.xplane.pb): "
                             "wire type 4 at byte 2\n")


@pytest.mark.slow
def test_a_file_that_is_no_profile_prints_one_line_and_nothing_else(tmp_path):
    (tmp_path / "random.txt").write_text("hello, this is not a profile\n")
    shown = subprocess.run([sys.executable, "-c", "from mldiag.cli.main import run; run()", "analyze", "random.txt"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 3 and shown.stdout == ""
    assert shown.stderr == ("mldiag analyze: random.txt is not an XSpace profile (.xplane.pb): "
                            "wire type 4 at byte 2\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["random.txt"]


def test_a_bad_file_in_a_folder_is_named_by_its_path(tmp_path):
    session = tmp_path / "logdir" / "plugins" / "profile" / "s1"
    session.mkdir(parents=True)
    (session / "h0.xplane.pb").write_bytes(xplane("input_bound").read_bytes())
    (session / "h1.xplane.pb").write_bytes(b"<html>not a profile</html>\n")
    result = _analyze(str(tmp_path / "logdir"))
    assert result.exit_code == 3
    assert result.stderr == (f"mldiag analyze: {session / 'h1.xplane.pb'} is not an XSpace profile (.xplane.pb): "
                             "wire type 4 at byte 0\n")


@pytest.mark.parametrize("where", ["missing", "empty_folder"])
def test_a_path_without_profiles_exits_3(tmp_path, where):
    path = tmp_path / where
    if where == "empty_folder":
        path.mkdir()
    result = _analyze(str(path))
    assert result.exit_code == 3 and len(result.stderr.strip().splitlines()) == 1


def _length_delimited(field: int, payload: bytes) -> bytes:
    def varint(value: int) -> bytes:
        out = bytearray()
        while value > 0x7F:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        return bytes(out) + bytes([value])
    return varint(field << 3 | 2) + varint(len(payload)) + payload


@pytest.mark.slow
def test_a_plane_nested_3000_deep_is_one_line_with_no_xprof_traceback(tmp_path):
    nested = b""
    for _ in range(3000):
        nested = _length_delimited(100, nested)  # an unknown field of the plane, each holding the next
    hostile = tmp_path / "deep.xplane.pb"
    hostile.write_bytes(_length_delimited(1, _length_delimited(2, b"/host:CPU") + nested))
    # Its own process: XProf's tools log through the root logger, which pytest would capture here.
    result = subprocess.run([str(Path(sys.executable).parent / "mldiag"), "analyze", str(hostile), "--out",
                             str(tmp_path / "out")], capture_output=True, text=True, timeout=240)
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines() == [f"mldiag analyze: {hostile.name}: the profile has no trace events"]


def test_a_memory_ceiling_too_low_for_xprof_skips_its_tools_and_says_so(tmp_path):
    result = _analyze(str(xplane("input_bound")), "--out", str(tmp_path), "--memory-ceiling", "1MiB",
                      "--format", "json")
    assert result.exit_code == 0, result.output
    tools = {tool["name"]: tool for tool in json.loads(result.stdout)["tools"]}
    assert tools["get_xprof_overview"]["status"] == "skipped"
    assert tools["get_xprof_overview"]["reason"].startswith("skipped: needs ~0.01 GiB, ceiling 0.00 GiB; no XProf")


@pytest.mark.parametrize("ceiling", ["8 gigs", "0", "-1GiB"])
def test_a_memory_ceiling_that_is_no_size_is_one_line(tmp_path, ceiling):
    result = _analyze(str(xplane("input_bound")), "--out", str(tmp_path), "--memory-ceiling", ceiling)
    said = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 2
    assert "is not a memory size" in said or "must be more than 0 bytes" in said
    assert "Traceback" not in result.output
