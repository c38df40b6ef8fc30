"""The BlobStore contract: LocalBlobs and GcsBlobs (on fake-gcs-server) answer alike."""

from __future__ import annotations

from datetime import datetime

import pytest

from mldiag.domain.errors import InvalidArgument, NotFound


def test_write_read_stat_round_trip(blobs, bucket):
    uri = f"{bucket}/runs/r1/plugins/profile/2026_01_01/host:1.xplane.pb"
    written = blobs.write_bytes(uri, b"\x00profile\xff")
    assert written.uri == uri and written.size == 9 and written.generation
    assert isinstance(written.generation, str)
    assert isinstance(written.updated, datetime) and written.updated.tzinfo is not None

    assert blobs.read_bytes(uri) == b"\x00profile\xff"
    stat = blobs.stat(uri)
    assert (stat.uri, stat.size, stat.generation) == (uri, 9, written.generation)


def test_content_type_is_guessed_from_the_name(blobs, bucket):
    assert blobs.write_bytes(f"{bucket}/analysis.json", b"{}").content_type == "application/json"
    assert blobs.write_bytes(f"{bucket}/summary.html", b"<p>").content_type == "text/html"


def test_overwrite_changes_content_and_generation(blobs, bucket):
    uri = f"{bucket}/analysis.json"
    first = blobs.write_bytes(uri, b"{}")
    second = blobs.write_bytes(uri, b'{"v": 2}')
    assert second.generation != first.generation
    assert blobs.stat(uri).generation == second.generation
    assert blobs.read_bytes(uri) == b'{"v": 2}'


def test_a_write_if_absent_keeps_what_is_there(blobs, bucket, tmp_path):
    """Write-once work retried (needs only the right to create: ``ifGenerationMatch=0``, 412 is done)."""
    uri = f"{bucket}/raw/event.json"
    first = blobs.write_bytes(uri, b"first", if_absent=True)
    assert first is not None and blobs.read_bytes(uri) == b"first"
    assert blobs.write_bytes(uri, b"second", if_absent=True) is None
    source = tmp_path / "trace.xplane.pb"
    source.write_bytes(b"third")
    assert blobs.upload(source, uri, if_absent=True) is None
    assert blobs.read_bytes(uri) == b"first" and blobs.stat(uri).generation == first.generation
    assert blobs.upload(source, f"{bucket}/raw/other.xplane.pb", if_absent=True).size == 5


def test_max_bytes_is_checked_before_reading(blobs, bucket):
    uri = f"{bucket}/big.bin"
    blobs.write_bytes(uri, b"x" * 100)
    assert blobs.read_bytes(uri, max_bytes=100) == b"x" * 100
    with pytest.raises(InvalidArgument, match="100 bytes"):
        blobs.read_bytes(uri, max_bytes=99)


def test_missing_objects(blobs, bucket, tmp_path):
    uri = f"{bucket}/absent.json"
    assert blobs.stat(uri) is None
    with pytest.raises(NotFound):
        blobs.read_bytes(uri)
    with pytest.raises(NotFound):
        blobs.download(uri, tmp_path / "absent.json")
    assert not (tmp_path / "absent.json").exists()
    assert blobs.delete(uri) is False


def test_upload_and_download_files(blobs, bucket, tmp_path):
    source = tmp_path / "source.xplane.pb"
    source.write_bytes(b"\x01" * 4096)
    uploaded = blobs.upload(source, f"{bucket}/a/b.xplane.pb")
    assert uploaded.size == 4096

    destination = tmp_path / "deep" / "copy.xplane.pb"
    downloaded = blobs.download(f"{bucket}/a/b.xplane.pb", destination)
    assert destination.read_bytes() == source.read_bytes()
    assert downloaded.generation == uploaded.generation


def test_list_by_prefix(blobs, bucket):
    for name in ("r1/plugins/profile/s1/h.xplane.pb", "r1/plugins/profile/s2/h.xplane.pb",
                 "r10/x.json", "r2/y.json"):
        blobs.write_bytes(f"{bucket}/{name}", b"1")

    def listed(prefix: str) -> list[str]:
        return [info.uri.removeprefix(f"{bucket}/") for info in blobs.list(prefix)]

    assert listed(f"{bucket}/r1/plugins/") == ["r1/plugins/profile/s1/h.xplane.pb", "r1/plugins/profile/s2/h.xplane.pb"]
    assert listed(f"{bucket}/r1") == [
        "r1/plugins/profile/s1/h.xplane.pb", "r1/plugins/profile/s2/h.xplane.pb", "r10/x.json",
    ], "a prefix is a string prefix, not a folder"
    assert listed(f"{bucket}/") == listed(bucket) == [
        "r1/plugins/profile/s1/h.xplane.pb", "r1/plugins/profile/s2/h.xplane.pb", "r10/x.json", "r2/y.json",
    ]
    assert listed(f"{bucket}/nothing/") == []
    assert all(info.size == 1 for info in blobs.list(bucket))


def test_delete(blobs, bucket):
    uri = f"{bucket}/gone.json"
    blobs.write_bytes(uri, b"{}")
    assert blobs.delete(uri) is True
    assert blobs.stat(uri) is None
    assert blobs.delete(uri) is False


@pytest.mark.parametrize("path", ["../escape", "a/../../escape", "a/./b", "a\\b", "nul\x00"])
def test_paths_that_could_escape_the_bucket_are_refused(blobs, bucket, path):
    uri = f"{bucket}/{path}"
    with pytest.raises(InvalidArgument):
        blobs.write_bytes(uri, b"x")
    with pytest.raises(InvalidArgument):
        blobs.read_bytes(uri)
    with pytest.raises(InvalidArgument):
        blobs.stat(uri)


def test_uris_must_be_gs_uris_naming_an_object(blobs, bucket):
    for uri in ("/etc/passwd", "s3://bucket/x", bucket, "gs://UPPER/x"):
        with pytest.raises(InvalidArgument):
            blobs.write_bytes(uri, b"x")


def test_listing_in_name_order_from_after_a_name(blobs, bucket):
    names = ["runs/r1/plugins/profile/s1/a.xplane.pb", "runs/r1/plugins/profile/s1-b/c.pb",
             "runs/r1/plugins/profile/s1/b.xplane.pb", "runs/r1/plugins/profile/s2/d.xplane.pb"]
    written = {name: blobs.write_bytes(f"{bucket}/{name}", b"x") for name in names}
    blobs.write_bytes(f"{bucket}/elsewhere/e.json", b"{}")
    ordered = sorted(names)  # Cloud Storage's order: the names' UTF-8 bytes

    assert [info.uri for info in blobs.list_after(f"{bucket}/runs/")] == [f"{bucket}/{n}" for n in ordered]
    rest = list(blobs.list_after(f"{bucket}/runs/", ordered[1]))
    assert [info.uri for info in rest] == [f"{bucket}/{n}" for n in ordered[2:]]
    assert (rest[0].generation, rest[0].size) == (written[ordered[2]].generation, 1)
    assert rest[0].updated == written[ordered[2]].updated
    assert list(blobs.list_after(f"{bucket}/runs/", ordered[-1])) == []


def test_reading_the_first_bytes_of_an_object(blobs, bucket):
    uri = f"{bucket}/runs/r1/plugins/profile/s1/a.xplane.pb"
    blobs.write_bytes(uri, b"\x0a\x05hello and more")
    assert blobs.read_head(uri, 4) == b"\x0a\x05he"
    assert blobs.read_head(uri, 1000) == b"\x0a\x05hello and more"
    with pytest.raises(NotFound):
        blobs.read_head(f"{bucket}/absent.xplane.pb", 4)
