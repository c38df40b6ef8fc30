"""The data directory of ``mldiag up``, readable by its owner only.

It holds the SQLite store (with the runs' webhook secrets, Slack URLs and PagerDuty keys), the logs and
the share-link key, so the folder is 0700 and what ``mldiag up`` writes in it 0600: the process's umask
is 077 while it serves. A data directory made before, with wider modes, is tightened when it is opened:
the folder, the files directly in it and the log folder with its files; the bucket folders below are
out of others' reach once the data directory is.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

PRIVATE_UMASK = 0o077
LOGS = "logs"


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Everything created meanwhile is its owner's only (the umask is process-wide: one server per process)."""
    previous = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def make_private(data_dir: Path) -> list[str]:
    """Create ``data_dir`` as 0700, or take group and other access away from what it holds.

    Returns what was tightened, as ``path (was 0755)``, for the caller to log.
    """
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    tightened = []
    logs = data_dir / LOGS
    for path in [data_dir, *data_dir.iterdir(), *(logs.iterdir() if logs.is_dir() else ())]:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode) or not mode & 0o077:
            continue
        private = 0o700 if stat.S_ISDIR(mode) else 0o600
        os.chmod(path, stat.S_IMODE(mode) & private)
        tightened.append(f"{path} (was {stat.S_IMODE(mode):04o})")
    return tightened
