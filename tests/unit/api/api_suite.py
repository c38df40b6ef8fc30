"""What the API test suite shares besides fixtures: the paths it calls and a small client."""

from __future__ import annotations

from typing import Any

import requests
from flask import Flask
from flask.testing import FlaskClient
from requests.structures import CaseInsensitiveDict

PROJECT, LOCATION = "test-project", "test-location"
API_URL = "http://mldiag.test"
BASE = f"/v1alpha/projects/{PROJECT}/locations/{LOCATION}"
RUNS = f"{BASE}/machineLearningRuns"


class Api:
    """The Flask test client, with the paths and bodies the suite uses over and over."""

    def __init__(self, client: FlaskClient, headers: dict[str, str] | None = None):
        self.client = client
        self.headers = headers or {}

    def request(self, method: str, path: str, **kwargs: Any):
        return self.client.open(path, method=method, headers={**self.headers, **kwargs.pop("headers", {})},
                                **kwargs)

    def create_run(self, run_id: str, **body: Any) -> dict[str, Any]:
        response = self.request("POST", f"{RUNS}?machine_learning_run_id={run_id}", json=body)
        assert response.status_code == 200, response.json
        assert response.json["done"] is True
        return response.json["response"]

    def run(self, run_id: str):
        return self.request("GET", f"{RUNS}/{run_id}")


class WsgiAdapter(requests.adapters.BaseAdapter):
    """Serves a ``requests`` session from a WSGI app in this process, so real clients
    (the official SDK's, the CLI's) can talk to the app without a socket."""

    def __init__(self, app: Flask):
        super().__init__()
        self._client = app.test_client()

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        served = self._client.open(request.url, method=request.method, data=request.body,
                                   headers=dict(request.headers))
        response = requests.Response()
        response.status_code = served.status_code
        response._content = served.get_data()
        response.headers = CaseInsensitiveDict(served.headers)
        response.url = request.url or ""
        response.request = request
        return response

    def close(self) -> None:
        pass
