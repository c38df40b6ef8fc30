"""``mldiag compare`` on profiles traced afresh with JAX: healthy pairs of one loop pass, a slower input fails."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from typer.testing import CliRunner

from mldiag.cli.main import app

runner = CliRunner()


LOOP = textwrap.dedent("""
    import sys, time
    import jax, jax.numpy as jnp

    @jax.jit
    def step(x):
        return jnp.tanh(x @ x.T) @ x * 0.5

    x = jnp.ones((96, 96))
    step(x).block_until_ready()
    for logdir, input_s in (arg.split("=") for arg in sys.argv[1:]):
        with jax.profiler.trace(logdir):
            for i in range(40):
                with jax.profiler.StepTraceAnnotation("train", step_num=i):
                    time.sleep(float(input_s))  # the input pipeline
                    x = step(x).block_until_ready()
""")


def test_freshly_traced_healthy_pairs_of_one_loop_never_fail_and_a_slower_input_does(tmp_path):
    logdirs = [tmp_path / f"run{i}" for i in range(20)]
    slowed = tmp_path / "slowed"
    arguments = [f"{logdir}=0.004" for logdir in logdirs] + [f"{slowed}=0.008"]
    subprocess.run([sys.executable, "-c", LOOP, *arguments], check=True, timeout=300)
    for baseline, candidate in zip(logdirs[::2], logdirs[1::2], strict=True):
        result = runner.invoke(app, ["compare", str(baseline), str(candidate), "--format", "json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["step_time"]["candidate_steps"] >= 30
    assert runner.invoke(app, ["compare", str(logdirs[0]), str(slowed)]).exit_code == 1
