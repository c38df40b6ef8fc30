"""A real control plane on a free local port for the CLI to talk to, over SQLite."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from werkzeug.serving import make_server

from mldiag import bootstrap, logs
from mldiag.entrypoints.http.app import create_app
from mldiag.services.dependencies import Services
from mldiag.cli.main import app
from mldiag.config import Settings


OWNED_BUCKET = "profiles"  # the bucket the commands' runs write to, besides the default one


@dataclass
class Server:
    url: str
    services: Services


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    servers = []
    logs.configure("console")  # the server's log lines go to the real stderr, not the CLI's captured output

    def start(**settings: Any) -> Server:
        server = make_server("127.0.0.1", 0, app=None, threaded=True)  # bind first: the URL is a setting
        url = f"http://127.0.0.1:{server.server_port}"
        services = bootstrap.build(Settings(**{"data_dir": tmp_path / f"data-{len(servers)}", "api_url": url,
                                               "owned_buckets": [OWNED_BUCKET], **settings}))
        server.app = create_app(services)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        servers.append(server)
        return Server(url, services)

    yield start
    for server in servers:
        server.shutdown()


@pytest.fixture
def server(start_server: Callable[..., Server]) -> Server:
    return start_server()


@pytest.fixture
def mldiag(server: Server) -> Callable[..., Any]:
    """Run ``mldiag ARGS...`` against ``server``; returns click's Result."""
    runner = CliRunner()

    def run(*args: str, env: dict[str, str] | None = None) -> Any:
        return runner.invoke(app, list(args), env={"MLDIAG_API_URL": server.url, "COLUMNS": "200", **(env or {})})

    return run
