"""Native libraries' stderr as log lines: XProf's C++ logging goes to the log file, not between ``mldiag up``'s lines.

The profiler client that captures a workload logs through absl straight to
file descriptor 2, a few lines per capture. While :class:`NativeStderr` is
installed, descriptor 2 is a pipe whose lines are logged through the
``mldiag.native`` logger: as JSON to the log file, and to the terminal only
when it shows JSON (the human format shows notices, warnings and errors).
Python's own ``sys.stderr``, and so the terminal's log lines, write to a copy
of the original descriptor (unless it was something else, such as a capture).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TextIO

LOGGER = "mldiag.native"
STDERR = 2


class NativeStderr:
    """Descriptor 2 read into :data:`LOGGER` from :meth:`install` until :meth:`restore`."""

    def __init__(self) -> None:
        self._terminal_fd = -1
        self._python_stderr: TextIO | None = None
        self._reader: threading.Thread | None = None

    def install(self) -> None:
        """Divert descriptor 2; call before the log handlers are made, so that theirs is the terminal's copy."""
        sys.stderr.flush()
        self._terminal_fd = os.dup(STDERR)
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, STDERR)
        os.close(write_fd)
        self._python_stderr = sys.stderr
        if _writes_to_descriptor_2(sys.stderr):
            sys.stderr = open(self._terminal_fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                              closefd=False)
        self._reader = threading.Thread(target=self._log_lines, args=(read_fd,), name="mldiag-native-stderr",
                                        daemon=True)
        self._reader.start()

    def _log_lines(self, read_fd: int) -> None:
        log = logging.getLogger(LOGGER)
        with open(read_fd, encoding="utf-8", errors="backslashreplace") as lines:
            for line in lines:
                if line.strip():
                    log.info(line.rstrip("\n"))

    def restore(self) -> None:
        """Put descriptor 2 and ``sys.stderr`` back, once; the lines written so far are logged first."""
        if self._python_stderr is None:
            return
        sys.stderr.flush()
        os.dup2(self._terminal_fd, STDERR)  # closes the pipe's last writer here: the reader sees its end
        if self._reader is not None:
            self._reader.join(timeout=5)
        if sys.stderr is not self._python_stderr:
            sys.stderr.close()
            sys.stderr = self._python_stderr
        os.close(self._terminal_fd)
        self._python_stderr, self._reader, self._terminal_fd = None, None, -1


def _writes_to_descriptor_2(stream: TextIO) -> bool:
    """Whether ``stream`` is descriptor 2 itself (a test's capture, say, is not)."""
    try:
        return stream.fileno() == STDERR
    except (AttributeError, OSError, ValueError):
        return False
