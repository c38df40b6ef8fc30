"""scripts/bench_upload_to_report.py: each upload is set against the standalone analysis of the same run, as a
ratio and a difference, and the target is judged on the worst difference."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("bench_upload_to_report",
                                                  REPO / "scripts" / "bench_upload_to_report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class _FakeUp:
    def __init__(self, data: Path):
        self.data = data

    def wait_until_ready(self) -> None:
        pass

    def stop(self) -> None:
        pass


def test_each_upload_is_set_against_the_standalone_analysis_of_its_run(tmp_path, monkeypatch, capsys):
    bench = _script()
    profile = tmp_path / "host.xplane.pb"
    profile.write_bytes(b"x" * 1000)
    standalone = iter([2.0, 4.0])
    uploads = iter([bench.Upload(5.0, 0.5, 3.0, 2.0), bench.Upload(10.0, 0.5, 3.0, 7.0)])
    monkeypatch.setattr(bench, "LocalUp", _FakeUp)
    monkeypatch.setattr(bench, "_standalone", lambda profile: next(standalone))
    monkeypatch.setattr(bench, "_upload", lambda up, profile, session: next(uploads))

    figures = bench.bench(profile, 2)

    assert figures["ratio"] == [2.5, 2.5]
    assert figures["difference_s"] == [3.0, 6.0]
    assert "target: difference <= 5 s: missed" in capsys.readouterr().out
