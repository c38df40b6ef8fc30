"""Which ``<host>.xplane.pb`` files a path names, and the private copy analysis works on.

A path may be a single file, a session folder
(``<run>/plugins/profile/<session>/``) or a logdir that holds sessions (a
``gs://`` URI of any of these is downloaded first:
:mod:`mldiag.services.session_files`). A logdir with several sessions means its latest
one (session folders are named by capture time), as XProf's own tools do.

XProf's converters write cache files next to the profile they read, so nothing
is ever converted where the user keeps it: :func:`copy_session` puts the files
in a scratch folder first.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mldiag.analysis.profile.wire import MalformedXSpace, check_xspace
from mldiag.domain import layout
from mldiag.domain.errors import InvalidArgument
from mldiag.domain.layout import XPLANE_SUFFIX

UNREADABLE_EXIT = 3  # the exit status of a command given something that is not a profile


class UnreadableProfile(InvalidArgument):
    """The input is missing, empty, truncated, or not an XSpace protobuf."""


@dataclass(frozen=True)
class Session:
    """The files of one profiling session (one file per host)."""

    name: str
    files: tuple[Path, ...]
    note: str = ""  # what was chosen when the path named more than one session

    @property
    def bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)


def host_of(xplane: Path) -> str:
    """The host a profile file belongs to: its name without ``.xplane.pb``."""
    return layout.host_of(xplane.name)


def choose_session(xplanes: list[PurePosixPath], named: str) -> tuple[PurePosixPath, list[PurePosixPath], str]:
    """Group profile files by folder and pick the session: the only one, or the latest by name."""
    if not xplanes:
        raise UnreadableProfile(f"no {XPLANE_SUFFIX} files under {named}")
    folders: dict[PurePosixPath, list[PurePosixPath]] = {}
    for xplane in sorted(xplanes):
        folders.setdefault(xplane.parent, []).append(xplane)
    chosen = max(folders, key=lambda folder: (folder.name, str(folder)))
    note = ""
    if len(folders) > 1:
        note = f"{named} holds {len(folders)} sessions; analysed the latest, {chosen.name!r}"
    return chosen, folders[chosen], note


def _require_xspace(path: Path, shown_as: str) -> None:
    """Raise :class:`UnreadableProfile`, naming the file ``shown_as``, unless ``path`` frames as an XSpace."""
    try:
        check_xspace(path)
    except MalformedXSpace as error:
        raise UnreadableProfile(f"{shown_as} is not an XSpace profile ({XPLANE_SUFFIX}): {error}") from None


def find_session(path: Path) -> Session:
    """The session a local file or folder names; a file that is not a profile is refused under the name given."""
    if path.is_file():
        _require_xspace(path, str(path))
        return Session(path.parent.name, (path,))
    if not path.is_dir():
        raise UnreadableProfile(f"{path} does not exist")
    xplanes = [PurePosixPath(p.as_posix()) for p in path.rglob(f"*{XPLANE_SUFFIX}") if p.is_file()]
    folder, files, note = choose_session(xplanes, str(path))
    for file in files:
        _require_xspace(Path(file), str(file))
    return Session(folder.name, tuple(Path(f) for f in files), note)


def copy_session(session: Session, scratch: Path, *, owned: bool = False) -> Session:
    """Copy the session's files into ``scratch/<session>/``, the folder the converters may write in.

    ``owned`` files are the analysis's own (downloaded for it, nothing else writes them): they are linked there
    instead where the filesystem allows, so that a profile held in memory (Cloud Run's in-memory filesystem) is
    not held twice. A file that is not a profile is refused by name first, before anything reads it.
    """
    folder = scratch / (session.name or "session")
    folder.mkdir(parents=True, exist_ok=True)
    copies = []
    for xplane in session.files:
        _require_xspace(xplane, xplane.name)
        copy = folder / (host_of(xplane) + XPLANE_SUFFIX)
        if not (owned and _linked(xplane, copy)):
            shutil.copyfile(xplane, copy)
        copies.append(copy)
    return Session(session.name, tuple(copies), session.note)


def _linked(source: Path, link: Path) -> bool:
    """Whether ``link`` is now a hard link to ``source`` (False across filesystems, or where links are refused)."""
    try:
        os.link(source, link)
    except OSError:
        return False
    return True
