"""Memory the analysis holds in files: an in-memory filesystem's copy of the profile counts against the ceiling."""

from __future__ import annotations

import pytest

from mldiag.analysis.xprof.budget import GIB, MemoryBudget, in_memory_filesystem

MOUNTS = """overlay / overlay rw,relatime 0 0
tmpfs /tmp tmpfs rw,nosuid,nodev 0 0
/dev/sdb1 /tmp/disk ext4 rw,relatime 0 0
tmpfs /run/my\\040scratch tmpfs rw 0 0
"""


def test_cloud_run_s_writable_filesystem_is_memory():
    assert in_memory_filesystem("/work/scratch", environ={"K_SERVICE": "mldiag-analyze-session"})


@pytest.mark.parametrize(("path", "in_memory"), [
    ("/tmp/mldiag-1/host.xplane.pb", True),
    ("/tmp/disk/mldiag-1/host.xplane.pb", False),  # the longest mount point that holds the path decides
    ("/run/my scratch/host.xplane.pb", True),
    ("/work/scratch", False),
])
def test_a_tmpfs_mount_is_memory_and_a_disk_is_not(tmp_path, path, in_memory):
    table = tmp_path / "mounts"
    table.write_text(MOUNTS)
    assert in_memory_filesystem(path, environ={}, mount_table=str(table)) is in_memory


def test_files_held_in_memory_come_off_the_budget():
    plain = MemoryBudget.under_ceiling(8 * GIB)
    holding = MemoryBudget.under_ceiling(8 * GIB, held_in_files=3 * GIB)
    assert plain.limit - holding.limit >= 3 * GIB - 64 * 1024**2  # the process may grow a little in between


def test_on_cloud_run_the_analysis_keeps_the_profile_and_its_slices_off_its_budget(monkeypatch, tmp_path):
    from analysis_support import xplane

    from mldiag.analysis.engine import start_analysis

    held = []
    under_ceiling = MemoryBudget.under_ceiling.__func__

    def recorded(cls, *args, held_in_files=0, **kwargs):
        held.append(held_in_files)
        return under_ceiling(cls, *args, held_in_files=held_in_files, **kwargs)

    monkeypatch.setattr(MemoryBudget, "under_ceiling", classmethod(recorded))
    with start_analysis([xplane("compute_bound")], tmp_path / "disk", memory_ceiling_bytes=4 * GIB) as running:
        profile = running.session.bytes
    monkeypatch.setenv("K_SERVICE", "mldiag-analyze-session")
    with start_analysis([xplane("compute_bound")], tmp_path / "cloud-run", memory_ceiling_bytes=4 * GIB):
        pass
    assert held == [0, 2 * profile]
