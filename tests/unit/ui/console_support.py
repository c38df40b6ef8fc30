"""The console test helpers: a browser-like client over embedded services, and seed data."""

from __future__ import annotations

import re
from typing import Any

from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from mldiag.entrypoints.http.app import create_app
from mldiag.services.dependencies import Services
from mldiag.domain import MachineLearningRun, ProfilerSession, ProfilerTarget
from mldiag.domain.names import LocationName, RunName

API_URL = "http://127.0.0.1:8080"
LOCATION = LocationName("p", "l")
_CSRF = re.compile(r'name="csrf_token" value="([^"]*)"')


class Console:
    """A browser's view of the console: it keeps cookies and posts forms with the token of the page."""

    def __init__(self, services: Services):
        self.services = services
        self.app = create_app(services)
        self.client: FlaskClient = self.app.test_client()

    def get(self, path: str, **kwargs: Any) -> TestResponse:
        return self.client.get(path, **kwargs)

    def form_token(self, page: str = "/ui/sign-in") -> str:
        """The hidden token of the forms on ``page`` (fetching it also sets the token cookie)."""
        match = _CSRF.search(self.get(page).get_data(as_text=True))
        assert match, f"{page} has no form token"
        return match[1]

    def post(self, path: str, data: dict[str, Any] | None = None, *, page: str = "/ui/sign-in",
             token: str | None = None,
             **kwargs: Any) -> TestResponse:
        """Post a form as the console's page ``page`` would (its token unless ``token`` is given)."""
        fields = {"csrf_token": self.form_token(page) if token is None else token, **(data or {})}
        return self.client.post(path, data=fields, **kwargs)

    def text(self, path: str) -> str:
        response = self.get(path)
        assert response.status_code == 200, response.get_data(as_text=True)[:2000]
        return response.get_data(as_text=True)


def add_run(services: Services, run_id: str = "r1", **fields: Any) -> RunName:
    name = LOCATION.run(run_id)
    services.runs.create(MachineLearningRun(name=str(name), artifacts={"gcsPath": "gs://mldiag-profiles/runs"},
                                            **fields))
    return name


def add_target(services: Services, run: RunName, target_id: str = "host-0", **fields: Any) -> ProfilerTarget:
    return services.targets.create(ProfilerTarget(
        name=f"{run}/profilerTargets/{target_id}", hostname=fields.pop("hostname", "host"),
        profiler_address=fields.pop("profiler_address", "127.0.0.1:9999"), **fields))


def add_session(services: Services, run: RunName, session_id: str = "s1", **fields: Any) -> ProfilerSession:
    folder = f"gs://mldiag-profiles/runs/{run.run}/plugins/profile/{session_id}"
    return services.sessions.create(ProfilerSession(
        name=f"{run}/profilerSessions/{session_id}", storage_folder_uri=folder,
        dashboard_uri=f"{API_URL}/viewer/?session_path={folder}", **fields))
