"""The child process of :class:`~mldiag.adapters.analysis_runner.child_process.ChildProcessAnalysisRunner`:
one analysis job in a process of its own.

A process of its own, so that a time limit really stops the work and running
out of memory ends this process rather than its parent. It reads one request
on stdin (:func:`encode_request`: the job, which result it wants, and the
settings its reasoner reads), runs the job (:mod:`.work`) and writes the result
as JSON on stdout, which is its alone: what the analysis prints goes nowhere.
Exit 3 (with the reason on stderr) means the profile cannot be read, exit 4
that its processes went over the memory ceiling; SIGTERM or SIGINT stop it at
once (exit 143 or 130), its private copies removed
(:mod:`mldiag.analysis.stopping`). Any other failure exits 1, the error on the
last line of stderr.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from mldiag.analysis.stopping import PRIVATE_FOLDER_PREFIX, stop_now, stopping
from mldiag.ports import AnalysisJob

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from mldiag.config import Settings


@dataclass(frozen=True)
class WorkerRequest:
    job: AnalysisJob
    host: bool  # one host's evidence, not the session's analysis
    reasoner_settings: dict[str, Any]  # what the investigation reads of the settings (REASONER_SETTINGS)


@functools.cache
def _requests() -> TypeAdapter[WorkerRequest]:
    from pydantic import TypeAdapter

    return TypeAdapter(WorkerRequest)


def encode_request(job: AnalysisJob, *, host: bool, settings: Settings) -> bytes:
    """The request for ``job``: the session's analysis, or with ``host`` one host's evidence; the reasoner is the
    one ``settings`` name."""
    from mldiag.adapters.reasoning import REASONER_SETTINGS

    reasoner_settings = settings.model_dump(mode="json", include=set(REASONER_SETTINGS))
    return _requests().dump_json(WorkerRequest(job, host, reasoner_settings))


def main() -> int:
    results = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    request = _requests().validate_json(sys.stdin.buffer.read())
    job = request.job

    def stop(why: str, code: int) -> NoReturn:
        stop_now(job.scratch.glob(f"{PRIVATE_FOLDER_PREFIX}*"), why, code)

    from mldiag.analysis.xprof.budget import enforced_ceiling

    with stopping(stop, memory_ceiling_bytes=enforced_ceiling(job.memory_ceiling_bytes)):  # before the imports,
        return _run(request, results)  # which take seconds


def _run(request: WorkerRequest, results: TextIO) -> int:
    from mldiag.adapters.analysis_runner import work
    from mldiag.adapters.reasoning import investigator
    from mldiag.analysis.profile.profiles import UNREADABLE_EXIT, UnreadableProfile
    from mldiag.config import Settings

    try:
        if request.host:
            result = work.analyse_host(request.job).model_dump_json()
        else:
            investigate = investigator(Settings.model_validate(request.reasoner_settings))
            result = work.analyse(request.job, investigate).model_dump_json(by_alias=True)
    except UnreadableProfile as error:
        print(error, file=sys.stderr)
        return UNREADABLE_EXIT
    results.write(result)
    results.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
