"""``mldiag agent`` as a person starts it: an SDK port it cannot listen on is a usage error naming the port."""

from __future__ import annotations

import socket


def test_an_sdk_port_in_use_is_a_usage_error_naming_it(mldiag):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = mldiag("agent", "--machine-learning-run", "r1", "--sdk-port", str(port))
    assert result.exit_code == 2
    assert f"Invalid value for --sdk-port: cannot listen on 127.0.0.1:{port} (Address already in use)" in result.output
    assert "Traceback" not in result.output
