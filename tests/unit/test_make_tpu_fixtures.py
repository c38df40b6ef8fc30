"""scripts/make_tpu_fixtures.py: a shape traced on the CPU gives its profile in the bucket's layout and a truth from
its own clock and ablation, and the truths go into expectation files without touching what people wrote there."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "make_tpu_fixtures.py"


def _make(tmp_path: Path, shape: str) -> dict:
    truth = tmp_path / "truth.json"
    subprocess.run([sys.executable, str(SCRIPT), "--platform", "cpu", "--only", shape, "--out", str(tmp_path / "p"),
                    "--truth", str(truth)], check=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    return json.loads(truth.read_text())[shape]


def test_an_eager_loop_is_traced_and_timed_against_its_jitted_twin(tmp_path):
    record = _make(tmp_path, "op_by_op_eager")
    xplane = tmp_path / "p" / "op_by_op_eager" / "plugins" / "profile" / "op_by_op_eager" / "fixture-host.xplane.pb"
    assert xplane.stat().st_size == record["meta"]["xplane_bytes"] > 0
    assert not list(xplane.parent.glob("*.trace.json.gz"))
    truth, iterations = record["truth"], record["meta"]["iterations_ms"]
    assert truth["steps"]["value"] == len(iterations) == 20
    assert abs(truth["iteration_ms"]["value"] - statistics.mean(iterations)) < 1e-3
    assert truth["compiles_in_trace"]["value"] == 0  # the warm-up iteration compiled every op before the trace
    assert truth["jit_twin_iteration_ms"]["value"] < truth["iteration_ms"]["value"]
    assert truth["jit_twin_speedup"]["value"] > 1
    assert all({"value", "how"} <= set(number) for number in truth.values())


def test_truths_replace_only_the_truth_block(tmp_path):
    truth = tmp_path / "truth.json"
    truth.write_text(json.dumps({"shape": {"meta": {"description": "d", "device_kind": "cpu", "jax": "0"},
                                           "truth": {"steps": {"value": 3, "abs": 0, "how": "counted"}}}}))
    command = [sys.executable, str(SCRIPT), "--write-expectations", str(truth), "--profiles", str(tmp_path),
               "--expectations", str(tmp_path), "--prefix", "x_"]
    subprocess.run(command, check=True)
    written = tmp_path / "x_shape.yaml"
    marker = "# The truth below"
    written.write_text(written.read_text().replace(marker, "expectations:\n  - id: steps\n    known_wrong: \"why\"\n"
                                                   "    value: metrics.steps\n    truth: steps\n" + marker, 1))
    truth.write_text(truth.read_text().replace('"value": 3', '"value": 4'))
    subprocess.run(command, check=True)
    document = yaml.safe_load(written.read_text())
    assert document["fixture"] == "x_shape"
    assert document["expectations"][0]["known_wrong"] == "why"
    assert document["truth"]["steps"]["value"] == 4
