"""scripts/bench_analysis.py: wall time and memory come from separate runs (sampling memory slows a process), and
each of mldiag's sides is printed against the XProf CLI's runs of the same repeat, as ratios."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("bench_analysis", REPO / "scripts" / "bench_analysis.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_wall_time_comes_from_unsampled_runs_and_memory_from_sampled_ones(tmp_path, monkeypatch, capsys):
    bench = _script()
    session = tmp_path / "s"
    session.mkdir()
    (session / "host.xplane.pb").write_bytes(b"x" * 1000)
    calls = []

    def cold_run(session, side, ceiling, *, sampled):
        calls.append((side, sampled))
        cli = side == bench.CLI_SIDE
        # A sampled run is slower; only it knows the memory.
        seconds = (20.0 if cli else 2.0) * (2 if sampled else 1)
        pss = (40_000 if cli else 10_000) if sampled else 0
        return bench.Run(seconds, pss, pss, [], seconds)

    monkeypatch.setattr(bench, "_cold_run", cold_run)
    sides = {"analyze_profile": "ours", bench.CLI_SIDE: "cli"}

    figures = bench._bench(session, sides, 2, "")

    assert sorted(calls) == sorted([(side, sampled) for side in sides for sampled in (False, True)] * 2)
    ours = figures["analyze_profile"]
    assert ours["seconds"] == [2.0, 2.0] and ours["wall_ratio_to_cli"] == [0.1, 0.1]
    assert ours["peak_pss_over_xplane"] == [10.0, 10.0] and ours["pss_ratio_to_cli"] == [0.25, 0.25]
    assert "wall / XProf CLI 0.100" in capsys.readouterr().out
