"""A capture only ever connects to an address registered for its run (no SSRF)."""

from __future__ import annotations

import json

import pytest

from mldiag import entrypoints
from mldiag.api import create_app
from mldiag.capture.targets import check_address, select_targets, split_address
from mldiag.config import CAPTURE_REQUESTS
from mldiag.domain.errors import FailedPrecondition, InvalidArgument
from mldiag.domain.resources import TargetState
from mldiag.eventlog import Outcome
from mldiag.messages import Message, encode_json, pubsub_cloud_event

CAPTURE_URL = "/v1alpha/projects/p/locations/l/machineLearningRuns/r1/profilerSessions:capture"


@pytest.mark.parametrize(("address", "expected"), [
    ("10.0.0.5:9999", ("10.0.0.5", 9999)),
    ("host-0.cluster.local:8471", ("host-0.cluster.local", 8471)),
    ("[fd00::5]:9999", ("fd00::5", 9999)),
])
def test_addresses_are_host_and_port(address, expected):
    assert split_address(address) == expected


@pytest.mark.parametrize("address", ["10.0.0.5", "10.0.0.5:0", "10.0.0.5:70000", ":9999", "h:port", ""])
def test_anything_but_host_and_port_is_refused(address):
    with pytest.raises(InvalidArgument, match="profilerAddress"):
        split_address(address)


@pytest.mark.parametrize("address", [
    "169.254.169.254:80", "metadata.google.internal:80", "METADATA.GOOGLE.INTERNAL.:80", "[fe80::1]:9999",
    "0.0.0.0:9999", "224.0.0.1:9999",
])
def test_metadata_link_local_and_unspecified_addresses_are_never_contacted(address):
    with pytest.raises(InvalidArgument):
        check_address(address)


def test_loopback_private_and_named_hosts_are_fine():
    for address in ("127.0.0.1:9999", "10.1.2.3:9999", "worker-3:9999"):
        assert check_address(address) == address


def test_targets_are_chosen_among_the_registered_ones_by_id(embedded, run, add_target):
    add_target("h-0")
    add_target("h-1", state=TargetState.GONE)
    assert [t.hostname for t in select_targets(embedded, run, [])] == ["h"]
    assert [t.name.rsplit("/", 1)[1] for t in select_targets(embedded, run, ["all"])] == ["h-0"]
    with pytest.raises(InvalidArgument, match=r"'127.0.0.1:9999' is not a profiler target registered .*h-0, h-1"):
        select_targets(embedded, run, ["127.0.0.1:9999"])
    with pytest.raises(FailedPrecondition, match="GONE"):
        select_targets(embedded, run, ["h-1"])


def test_a_registered_target_with_a_metadata_address_is_refused(embedded, run, add_target):
    add_target("evil", address="169.254.169.254:80")
    with pytest.raises(InvalidArgument, match="link-local"):
        select_targets(embedded, run, ["evil"])


def test_the_api_refuses_an_unregistered_address_and_connects_to_nothing(embedded, run, add_target,
                                                                         silent_listener):
    add_target("h-0", address="127.0.0.1:9")
    api = create_app(embedded).test_client()
    named = api.post(CAPTURE_URL, json={"profilerTargets": [f"127.0.0.1:{silent_listener.port}"]})
    smuggled = api.post(CAPTURE_URL, json={"profilerTargets": ["h-0"],
                                           "profilerAddress": f"127.0.0.1:{silent_listener.port}"})
    assert named.status_code == 400 and "not a profiler target registered" in named.json["error"]["message"]
    assert smuggled.status_code == 400 and "unknown field" in smuggled.json["error"]["message"]
    embedded.bus.drain()
    assert embedded.bus.published[CAPTURE_REQUESTS] == []
    assert embedded.store.query("profilerSessions") == []
    assert silent_listener.connections() == 0


def test_a_forged_capture_message_is_rejected_and_connects_to_nothing(embedded, run, silent_listener):
    for payload in ({"address": f"127.0.0.1:{silent_listener.port}"},
                    {"task": "operation-x:h-0", "address": f"127.0.0.1:{silent_listener.port}"}):
        message = Message(encode_json(payload), {}, f"m-{len(json.dumps(payload))}")
        event = pubsub_cloud_event(project="p", topic=CAPTURE_REQUESTS, subscription="dispatch_capture",
                                   message=message, published=embedded.now())
        assert entrypoints.dispatch_capture(embedded, event) is Outcome.REJECTED
    assert silent_listener.connections() == 0
