"""docs/ci.md's CI job, word for word: its capture script profiles a job twice, and its gate
(``mldiag compare`` with the workflow's thresholds) fails the second when its step is 30 % slower.

Only what the page says is the project's own is substituted: ``mytrainer``,
whose step returns at once while its work goes on, as a compiled JAX step
does, and whose result ``jax.block_until_ready`` waits for. The work lasts
``WORK_MS`` (a timer, so that it lasts as long however busy the machine is);
the candidate's lasts 30 % longer. A step time that ends when the call returns
cannot see the slowdown.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MLDIAG = str(Path(sys.executable).parent / "mldiag")
BASELINE_MS, SLOWER_MS = 20, 26  # 30 % more work a step

MYTRAINER = '''
import itertools
import os
import threading

import jax
import jax.numpy as jnp

WORK_S = float(os.environ["WORK_MS"]) / 1000


class Pending:
    """A step's result while its work runs, as a JAX array is once a compiled call has returned."""

    def __init__(self, value, done):
        self.value, self.done = value, done

    def block_until_ready(self):
        self.done.wait()
        return self


def make_state():
    done = threading.Event()
    done.set()
    return Pending(jnp.full((64, 64), 1 / 64, dtype=jnp.float32), done)


def batches():
    return itertools.repeat(jnp.eye(64, dtype=jnp.float32) * 0.5)


@jax.jit
def _update(weights, batch):
    return jnp.tanh(weights @ batch + weights)


def train_step(state, batch):
    done = threading.Event()
    threading.Timer(WORK_S, done.set).start()
    return Pending(_update(state.value, batch), done)
'''


def ci_md_blocks(language: str) -> list[str]:
    text = (REPO / "docs" / "ci.md").read_text(encoding="utf-8")
    section = text.split("\n## A CI job", 1)[1]
    return [code for fence, code in re.findall(r"^```(\w+)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
            if fence == language]


def gate_options() -> list[str]:
    """The thresholds the workflow's ``mldiag compare`` step passes."""
    (workflow,) = ci_md_blocks("yaml")
    command = workflow.split("mldiag compare", 1)[1].split("\n\n", 1)[0].replace("\\\n", " ")
    return [word for word in shlex.split(command.splitlines()[0])[2:]]


def profile(tmp_path: Path, name: str, work_ms: int) -> Path:
    """The documented ``python ci/profile_steps.py LOGDIR``, with the project's step working ``work_ms``."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WORK_MS": str(work_ms), "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "ci/profile_steps.py", name], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp_path / name


def compare(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([MLDIAG, "compare", *map(str, args)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "1000"})


def test_the_documented_gate_fails_a_step_30_percent_slower(tmp_path: Path):
    (script,) = ci_md_blocks("python")
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "profile_steps.py").write_text(script, encoding="utf-8")
    (tmp_path / "mytrainer.py").write_text(MYTRAINER, encoding="utf-8")
    options = gate_options()
    assert options == ["--max-step-time-regression", "5%", "--max-memory-regression", "10%"]

    baseline = profile(tmp_path, "main", BASELINE_MS)
    slower = profile(tmp_path, "branch", SLOWER_MS)
    gate = compare(baseline, slower, *options)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "REGRESSED" in gate.stdout and "step time" in gate.stdout.split("REGRESSED", 1)[1], gate.stdout

    step_time = json.loads(compare(baseline, slower, *options, "--format", "json").stdout)["step_time"]
    assert step_time["baseline_median_ms"] >= BASELINE_MS and step_time["candidate_median_ms"] >= SLOWER_MS
