"""A function starts in about the time of the framework alone: each ``functions/*/main.py`` imports in at most twice
a bare ``import functions_framework``, with nothing heavy on its import path (numpy, pydantic and the models built
on it, structlog and the rich it pulls in, the cloud clients): those load on the first event or request."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FUNCTIONS = sorted(main.parent.name for main in (REPO / "functions").glob("*/main.py"))
HEAVY = ("numpy", "pydantic", "structlog", "rich", "google.cloud.firestore", "google.cloud.pubsub_v1", "google.cloud.storage",
         "mldiag.analysis", "mldiag.adapters")
TARGET = 2.0  # main.py's import time over functions_framework's
RUNS = 5  # of each, interleaved; the quickest of each is compared (other load only ever slows a run)


def _python(function: str, code: str, *options: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO / "shared")}
    return subprocess.run([sys.executable, *options, "-c", code], cwd=REPO / "functions" / function, env=environment,
                          capture_output=True, text=True, check=True)


def _import_microseconds(function: str, module: str) -> int:
    """The cumulative import time of ``module``, as ``python -X importtime`` reports it."""
    done = _python(function, f"import {module}", "-X", "importtime")
    (line,) = [line for line in done.stderr.splitlines() if line.rstrip().endswith(f"| {module}")]
    return int(line.split("|")[1])


@pytest.mark.parametrize("function", FUNCTIONS)
def test_nothing_heavy_is_imported_when_a_function_starts(function):
    done = _python(function, f"import sys, main; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    assert done.stdout.split() == []


@pytest.mark.slow
@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_function_imports_in_at_most_twice_the_frameworks_time(function):
    framework, main = [], []
    for _ in range(RUNS):
        framework.append(_import_microseconds(function, "functions_framework"))
        main.append(_import_microseconds(function, "main"))
    assert min(main) <= TARGET * min(framework), (min(main), min(framework))
