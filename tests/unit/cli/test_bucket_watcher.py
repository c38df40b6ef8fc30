"""The local buckets' finalize notifications: one per settled file generation, never half a file."""

from __future__ import annotations

import json
import time

import pytest
from structlog.testing import capture_logs

from mldiag.local import bucket_watcher
from mldiag.adapters.bus.inprocess import InProcessBus
from mldiag.adapters.blobs.local import LocalBlobs
from mldiag.local.bucket_watcher import BucketWatcher
from mldiag.config import BUCKET_NOTIFICATIONS
from mldiag.domain.envelopes import message_from_cloud_event

OBJECT = "exp/run-1/plugins/profile/2026_01_01/host-0.xplane.pb"


@pytest.fixture
def blobs(tmp_path) -> LocalBlobs:
    return LocalBlobs(tmp_path)


@pytest.fixture
def received():
    return []


@pytest.fixture
def bus(received) -> InProcessBus:
    bus = InProcessBus("p")
    bus.subscribe(BUCKET_NOTIFICATIONS, lambda event: received.append(message_from_cloud_event(event)))
    return bus


def _write(blobs: LocalBlobs, name: str, data: bytes, bucket: str = "profiles"):
    path = blobs.buckets / bucket / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.slow
def test_a_file_is_announced_once_it_stops_changing(blobs, bus, received):
    watcher = BucketWatcher(blobs, bus, settle_seconds=0.2)
    path = _write(blobs, OBJECT, b"x" * 10)
    watcher.noticed(path, is_directory=False)
    assert watcher.check() == 0  # first look: just seen
    with path.open("ab") as growing:
        growing.write(b"y" * 10)
    time.sleep(0.25)
    assert watcher.check() == 0  # it changed since the last look
    time.sleep(0.25)
    assert watcher.check() == 1
    bus.drain()

    (message,) = received
    resource = json.loads(message.data)
    assert message.attributes["eventType"] == "OBJECT_FINALIZE"
    assert message.attributes["bucketId"] == "profiles" and message.attributes["objectId"] == OBJECT
    assert resource["name"] == OBJECT and resource["size"] == "20"
    assert resource["generation"] == message.attributes["objectGeneration"] == str(path.stat().st_mtime_ns)


def test_each_generation_is_announced_once(blobs, bus, received):
    watcher = BucketWatcher(blobs, bus, settle_seconds=0)
    path = _write(blobs, OBJECT, b"first")
    for _ in range(2):
        watcher.noticed(path, is_directory=False)
        watcher.check(), watcher.check()
    time.sleep(0.01)
    _write(blobs, OBJECT, b"second version")
    watcher.noticed(path, is_directory=False)
    watcher.check(), watcher.check()
    bus.drain()
    assert [json.loads(m.data)["size"] for m in received] == ["5", "14"]


def test_vanished_files_and_files_outside_any_bucket_are_not_announced(blobs, bus, received):
    watcher = BucketWatcher(blobs, bus, settle_seconds=0)
    temporary = _write(blobs, OBJECT + ".tmp", b"partial")
    watcher.noticed(temporary, is_directory=False)
    temporary.unlink()
    stray = blobs.buckets / "stray-file"
    stray.write_bytes(b"not in a bucket")
    watcher.noticed(stray, is_directory=False)
    watcher.check(), watcher.check()
    bus.drain()
    assert received == []


def test_every_bucket_folder_is_a_bucket(blobs, bus, received):
    watcher = BucketWatcher(blobs, bus, settle_seconds=0)
    for bucket in ("profiles", "other"):
        watcher.noticed(_write(blobs, OBJECT, b"a profile", bucket=bucket), is_directory=False)
    watcher.check(), watcher.check()
    bus.drain()
    assert sorted((m.attributes["bucketId"], m.attributes["objectId"]) for m in received) == [
        ("other", OBJECT), ("profiles", OBJECT)]


def test_a_folder_that_cannot_be_a_bucket_is_named_once_with_the_reason(blobs, bus, received):
    watcher = BucketWatcher(blobs, bus, settle_seconds=0)
    with capture_logs() as logged:
        for host in ("host-0", "host-1"):
            watcher.noticed(_write(blobs, f"exp/run-1/plugins/profile/s1/{host}.xplane.pb", b"x", bucket="My_Bucket"),
                            is_directory=False)
        watcher.check(), watcher.check()
    bus.drain()
    assert received == []
    (warning,) = [line for line in logged if line["log_level"] == "warning"]
    assert warning["event"] == f"{blobs.buckets / 'My_Bucket'} is not served"
    assert warning["reason"].startswith("'My_Bucket' is not a valid bucket name (3 to 222 lowercase letters")


@pytest.mark.slow
def test_the_running_watcher_sees_files_in_new_folders(blobs, bus, received):
    watcher = BucketWatcher(blobs, bus, settle_seconds=0.2, poll_seconds=0.05)
    watcher.start()
    try:
        _write(blobs, OBJECT, b"a profile")  # makes four new folders and a file at once
        _write(blobs, "exp/run-1/plugins/profile/2026_01_01/host-1.xplane.pb", b"another host")
        deadline = time.monotonic() + 10
        while len(received) < 2 and time.monotonic() < deadline:
            bus.drain()
            time.sleep(0.05)
    finally:
        watcher.stop()
    assert sorted(m.attributes["objectId"].rsplit("/", 1)[1] for m in received) == \
        ["host-0.xplane.pb", "host-1.xplane.pb"]


def test_only_local_buckets_can_be_watched(bus):
    with pytest.raises(TypeError):
        BucketWatcher(object(), bus)  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_watcher_whose_observer_died_recovers_and_misses_nothing(blobs, bus, received):
    watcher = BucketWatcher(blobs, bus, settle_seconds=0.1, poll_seconds=0.05)
    watcher.start()
    try:
        for emitter in list(watcher._observer.emitters):  # what a lost inotify race does to it
            emitter.stop()
            emitter.join()
        _write(blobs, OBJECT, b"written while nobody watched")
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            bus.drain()
            time.sleep(0.05)
    finally:
        watcher.stop()
    assert [m.attributes["objectId"] for m in received] == [OBJECT]


def _wait_for(received: list, bus: InProcessBus) -> None:
    deadline = time.monotonic() + 10
    while not received and time.monotonic() < deadline:
        bus.drain()
        time.sleep(0.05)


@pytest.mark.slow
def test_a_restart_that_loses_the_race_again_is_tried_at_the_next_look(blobs, bus, received, monkeypatch):
    starts = []

    class Racing(bucket_watcher.Observer):  # type: ignore[misc,valid-type]
        def start(self) -> None:
            starts.append(self)
            if len(starts) == 1:  # what inotify raises when a folder vanishes as it is being added
                raise FileNotFoundError(2, "No such file or directory")
            super().start()

    watcher = BucketWatcher(blobs, bus, settle_seconds=0.1, poll_seconds=0.05)
    watcher.start()
    monkeypatch.setattr(bucket_watcher, "Observer", Racing)
    try:
        for emitter in list(watcher._observer.emitters):
            emitter.stop()
            emitter.join()
        _write(blobs, OBJECT, b"written while the observer restarted")
        _wait_for(received, bus)
    finally:
        watcher.stop()
    assert len(starts) == 2 and not watcher._checker.is_alive()
    assert [m.attributes["objectId"] for m in received] == [OBJECT]


def test_a_folder_that_vanishes_while_it_is_looked_at_is_passed_over(blobs, bus, monkeypatch):
    watcher = BucketWatcher(blobs, bus, settle_seconds=0)
    folder = blobs.buckets / "profiles" / "tmp"
    folder.mkdir(parents=True)

    def vanished(self, pattern):
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(type(folder), "rglob", vanished)
    watcher.noticed(folder, is_directory=True)
    assert watcher.check() == 0
