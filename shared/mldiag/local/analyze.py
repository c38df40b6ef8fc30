"""Analysing a profile on this machine, with no control plane: the host of ``mldiag analyze`` and ``mldiag compare``.

A path is a logdir, a session folder, one ``<host>.xplane.pb``, or a ``gs://``
URI of any of these, downloaded through the blob store the settings name. The
analysis runs in a scratch folder removed on every way out; SIGTERM, Ctrl-C or
the time limit stop it at once, and so does its process tree passing the memory
ceiling (:mod:`mldiag.analysis.stopping`). XProf's tools
log each failure's traceback through Python's root logger; those records are
not printed, since the report's tool table names each failure.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from mldiag.analysis.stopping import stop_now, stopping
from mldiag.analysis.xprof.budget import enforced_ceiling
from mldiag.config import Settings

if TYPE_CHECKING:
    from mldiag.analysis.evidence import Analysis


def _ignore(message: str) -> None:
    """Progress nobody shows."""


@contextlib.contextmanager
def scratch_folder(command: str, *, timeout_s: float | None = None, limit: str = "",
                   memory_ceiling_bytes: int | None = None,
                   before_stop: Callable[[], None] = lambda: None) -> Iterator[Path]:
    """A scratch folder for analyses, removed on every way out; while inside, SIGTERM, SIGINT, the time limit
    (``limit`` says it as given) and the memory ceiling (:func:`~mldiag.analysis.xprof.budget.enforced_ceiling`
    of ``memory_ceiling_bytes``) run ``before_stop``, then stop at once with ``command: why`` on stderr."""
    scratch = Path(tempfile.mkdtemp(prefix="mldiag-analyze-"))

    def stop(why: str, code: int) -> NoReturn:
        before_stop()
        stop_now([scratch], f"{command}: {why}", code)

    try:
        with stopping(stop, timeout_s=timeout_s, limit=limit,
                      memory_ceiling_bytes=enforced_ceiling(memory_ceiling_bytes)):
            yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def analyse(path: str, scratch: Path, *, reasoner: str | None = None, memory_ceiling_bytes: int | None = None,
            progress: Callable[[str], None] = _ignore, note: Callable[[str], None] = _ignore) -> Analysis:
    """Find (or download) the profile at ``path`` and analyse it in ``scratch``.

    ``reasoner`` overrides the settings' (``offline`` or ``vertex``), ``memory_ceiling_bytes`` the default
    ceiling (:func:`mldiag.analysis.xprof.budget.default_ceiling`); ``progress`` gets each step as it
    starts, ``note`` what the reader should know about the profile chosen. Raises
    :class:`~mldiag.domain.errors.InvalidArgument` or :class:`~mldiag.domain.errors.NotFound` when
    ``path`` holds no readable profile.
    """
    from mldiag import bootstrap
    from mldiag.analysis import find_session, start_analysis

    settings = Settings.from_env()
    with _library_logs_unprinted():
        if path.startswith("gs://"):
            from mldiag.services.session_files import download_session

            progress(f"Downloading {path}")
            session = download_session(path, bootstrap.build_blobs(settings), scratch / "download")
        else:
            session = find_session(Path(path).expanduser())
        if session.note:
            note(session.note)
        with start_analysis(list(session.files), scratch, progress=progress,
                            memory_ceiling_bytes=memory_ceiling_bytes) as running:
            # Built while XProf converts the profile, which on a large one takes seconds.
            return running.finish(source=path, investigate=bootstrap.build_investigator(settings, reasoner))


@contextlib.contextmanager
def _library_logs_unprinted() -> Iterator[None]:
    """Keep Python's last-resort handler from printing records nobody configured a handler for."""
    root, unprinted = logging.getLogger(), logging.NullHandler()
    root.addHandler(unprinted)
    try:
        yield
    finally:
        root.removeHandler(unprinted)
