"""A capture only ever connects to an address registered for its run (no SSRF)."""

from __future__ import annotations

import json
import socket

import pytest

from mldiag.entrypoints import handlers
from mldiag.entrypoints.http.app import create_app
from mldiag.services.capture import targets
from mldiag.services.capture import tasks
from mldiag.services.capture.dispatch import run_direct
from mldiag.services.capture.targets import check_address, resolve_address, select_targets, split_address
from mldiag.config import CAPTURE_REQUESTS
from mldiag.domain.envelopes import Message, encode_json, pubsub_cloud_event
from mldiag.domain.errors import FailedPrecondition, InvalidArgument
from mldiag.domain.resources import TargetState
from mldiag.services.event_archive import Outcome

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


METADATA_SPELLINGS = [
    "[::ffff:169.254.169.254]:80", "[::ffff:a9fe:a9fe]:80", "2852039166:80", "0xa9fea9fe:80",
    "0251.0376.0251.0376:80", "169.254.43518:80", "0xa9.0xfe.0xa9.0xfe:80", "[64:ff9b::a9fe:a9fe]:80",
    "[fd20:ce::254]:80", "[::169.254.169.254]:80", "[::a9fe:a9fe]:80", "[2002:a9fe:a9fe::1]:80",
    "[2001:0:4136:e378:8000:63bf:5601:5601]:80",  # Teredo, whose client is 169.254.169.254 with its bits flipped
]


@pytest.mark.parametrize("address", METADATA_SPELLINGS)
def test_every_spelling_of_the_metadata_address_is_refused(address):
    with pytest.raises(InvalidArgument, match="metadata server"):
        check_address(address)


@pytest.mark.parametrize(("address", "reason"), [
    ("0:80", "unspecified"), ("[::]:80", "unspecified"), ("[::ffff:0.0.0.0]:80", "unspecified"),
    ("169.254.1.1:9999", "link-local"), ("[fe80::1%lo]:9999", "link-local"), ("0xe0000001:9999", "multicast"),
])
def test_other_spellings_of_refused_addresses_are_refused(address, reason):
    with pytest.raises(InvalidArgument, match=reason):
        check_address(address)


@pytest.mark.parametrize("address", ["a b:80", "host\x00:80", "[::1]x:80"])
def test_a_host_that_is_neither_a_name_nor_an_address_is_refused(address):
    with pytest.raises(InvalidArgument, match="not host:port"):
        split_address(address)


def test_loopback_private_and_named_hosts_are_fine():
    for address in ("127.0.0.1:9999", "10.1.2.3:9999", "worker-3:9999", "[::1]:9999", "[::ffff:10.0.0.5]:9999"):
        assert check_address(address) == address


@pytest.fixture
def dns(monkeypatch):
    """Names resolve to what the test says (the resolver is the system's for numeric hosts)."""
    answers: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if host not in answers:
            return real(host, port, family, type, proto, flags)
        if flags & socket.AI_NUMERICHOST:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))
                for ip in answers[host]]

    monkeypatch.setattr(targets.socket, "getaddrinfo", getaddrinfo)
    return answers


@pytest.mark.parametrize("answer", [["169.254.169.254"], ["10.0.0.5", "169.254.169.254"], ["fe80::1"],
                                    ["::ffff:169.254.169.254"]])
def test_a_name_that_resolves_to_a_refused_address_is_refused_when_connecting(dns, answer):
    dns["evil.example.com"] = answer
    assert check_address("evil.example.com:80") == "evil.example.com:80"  # no DNS at registration
    with pytest.raises(InvalidArgument, match=r"'evil.example.com:80' \(.*\) is a"):
        resolve_address("evil.example.com:80")


def test_a_capture_dials_the_address_it_checked(dns):
    dns["worker-3"] = ["10.0.0.5", "10.0.0.6"]
    dns["worker-6"] = ["fd00::6"]
    assert resolve_address("worker-3:9999") == "10.0.0.5:9999"
    assert resolve_address("worker-6:9999") == "[fd00::6]:9999"
    assert resolve_address("127.0.0.1:9999") == "127.0.0.1:9999"


def test_a_capture_of_a_name_resolving_to_the_metadata_server_connects_to_nothing(embedded, run, add_target,
                                                                                   dns, monkeypatch):
    dns["evil.example.com"] = ["169.254.169.254"]
    add_target("evil", address="evil.example.com:80")
    dialled = []
    monkeypatch.setattr(socket, "create_connection", lambda *args, **kwargs: dialled.append(args))
    task = tasks.new_task("projects/p/locations/l/operations/o1", str(run), "evil", ["evil"], tasks.Action.SNAPSHOT,
                          embedded.now())
    result = run_direct(embedded, task)
    assert "refusing to connect" in result.error and "metadata server" in result.error
    assert dialled == []


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
    with pytest.raises(InvalidArgument, match="metadata server"):
        select_targets(embedded, run, ["evil"])


@pytest.mark.parametrize("address", ["169.254.169.254:80", "0xa9fea9fe:80", "[fe80::1]:9999"])
def test_registering_a_target_at_a_refused_address_is_refused(embedded, run, address):
    api = create_app(embedded).test_client()
    response = api.post(f"/v1alpha/{run}/profilerTargets?profiler_target_id=evil",
                        json={"hostname": "h", "profilerAddress": address})
    assert response.status_code == 400 and "profilerAddress" in response.json["error"]["message"]
    assert embedded.store.query("profilerTargets") == []


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
        assert handlers.dispatch_capture(embedded, event) is Outcome.REJECTED
    assert silent_listener.connections() == 0
