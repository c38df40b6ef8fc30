"""A session's private copy: its own downloads are linked, not held twice; anyone else's files are copied."""

from __future__ import annotations

import shutil

from analysis_support import xplane

from mldiag.analysis.profile.profiles import Session, copy_session


def _session(tmp_path) -> Session:
    source = tmp_path / "downloads" / "host-0.xplane.pb"
    source.parent.mkdir()
    shutil.copyfile(xplane("compute_bound"), source)
    return Session("s1", (source,))


def test_an_analysis_own_download_is_linked_not_copied(tmp_path):
    session = _session(tmp_path)
    private = copy_session(session, tmp_path / "scratch", owned=True)
    assert private.files[0].samefile(session.files[0])  # one inode: an in-memory filesystem holds it once


def test_a_users_files_are_copied_so_that_a_rewrite_cannot_reach_the_analysis(tmp_path):
    session = _session(tmp_path)
    private = copy_session(session, tmp_path / "scratch")
    assert not private.files[0].samefile(session.files[0])
    assert private.files[0].read_bytes() == session.files[0].read_bytes()
