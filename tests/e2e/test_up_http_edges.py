"""``mldiag up``'s HTTP server as clients reach it: a burst of connections, and Host names not its own."""

from __future__ import annotations

import http.client
import threading
from urllib.parse import urlsplit

CLIENTS = 200
RUNS = "/v1alpha/projects/local-project/locations/local/machineLearningRuns"


def _get(port: int, host: str | None = None) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", RUNS, headers={"Host": host} if host else {})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_a_burst_of_200_clients_connecting_at_once_is_served_without_a_reset(control_plane):
    port = urlsplit(control_plane.url).port
    release = threading.Barrier(CLIENTS)
    answers: list[object] = []

    def client() -> None:
        release.wait()
        try:
            answers.append(_get(port))
        except OSError as error:  # a listen queue too short resets connections (ConnectionResetError)
            answers.append(type(error).__name__)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert answers == [200] * CLIENTS


def test_a_request_for_another_host_name_is_refused(control_plane):
    port = urlsplit(control_plane.url).port
    assert _get(port, f"rebound.example:{port}") == 400
    assert _get(port, f"localhost:{port}") == _get(port, f"127.0.0.1:{port}") == 200
