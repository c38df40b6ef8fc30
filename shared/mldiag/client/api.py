"""The control plane's HTTP client: calls, their errors, paged lists, and runs found by display name.

A failed call raises :class:`ApiError` with the server's status and message.
Wherever a caller names a run, it may give the run's id, its full name, or its
display name when one run has it (:meth:`ApiClient.find_run`): the official
SDK's runs have generated ids, and people know them by the name they gave.
The lookup lives here rather than in the API, which stays resource-oriented:
a run's name is its id, and a display name is just a filterable field.
How a client authenticates other than with a bearer token is
:mod:`mldiag.client.credentials`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mldiag.domain.names import is_id

if TYPE_CHECKING:
    import requests

MAX_PAGE_SIZE = 1000
MAX_IDS_SHOWN = 5


class ApiError(Exception):
    """The control plane refused a call or could not be reached; ``status`` is the API's (``NOT_FOUND``)."""

    def __init__(self, message: str, status: str = ""):
        super().__init__(message)
        self.status = status


class RunNotGiven(ValueError):
    """A run's child was given by id, without the run it belongs to."""


class ApiClient:
    def __init__(self, api_url: str, token: str = "", *, timeout: float = 30.0,
                 session: requests.Session | None = None):
        import requests  # here rather than at the top: commands that make no call start faster

        self.api_url = api_url.rstrip("/")
        self.session = session or requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout

    def authorize(self) -> None:
        """Make sure the session's credentials are current (a subclass refreshes expiring ones)."""

    def send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """One request to ``path`` with this client's credentials, answered as it came back."""
        import requests

        self.authorize()
        try:
            return self.session.request(method, f"{self.api_url}/{path.lstrip('/')}", timeout=self.timeout,
                                        **kwargs)
        except requests.RequestException as error:
            raise ApiError(f"cannot reach the control plane at {self.api_url} ({type(error).__name__}); "
                           "start one with `mldiag up` or point --api-url at yours") from None

    def call(self, method: str, path: str, *, params: dict[str, Any] | None = None,
             body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"{self.api_url}/{path.lstrip('/')}"
        response = self.send(method, path, params=params, json=body)
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if response.status_code >= 400:
            error = payload.get("error", {}) if isinstance(payload, dict) else {}
            message = error.get("message") or response.text[:200] or response.reason
            status = str(error.get("status") or "")
            raise ApiError(f"{status or response.status_code}: {message}", status)
        if not isinstance(payload, dict):
            raise ApiError(f"{method} {url} answered with something other than a JSON object")
        return payload

    def mutate(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """A call answered by a long-running operation; returns the operation's result."""
        operation = self.call(method, path, **kwargs)
        if not operation.get("done"):
            raise ApiError(f"operation {operation.get('name')} is still running; check it later")
        if operation.get("error"):
            raise ApiError(operation["error"].get("message", "the operation failed"))
        return operation.get("response", {})

    def list_all(self, path: str, collection: str, *, limit: int | None = None, filter: str = "",
             order_by: str = "") -> list[dict[str, Any]]:
        """Every item of ``collection`` (up to ``limit``), following page tokens."""
        items: list[dict[str, Any]] = []
        token = ""
        while limit is None or len(items) < limit:
            page_size = MAX_PAGE_SIZE if limit is None else min(MAX_PAGE_SIZE, limit - len(items))
            params = {"pageSize": page_size, "pageToken": token, "filter": filter, "orderBy": order_by}
            page = self.call("GET", path, params={k: v for k, v in params.items() if v})
            items += page.get(collection, [])
            token = page.get("nextPageToken", "")
            if not token:
                break
        return items[:limit]

    def find_run(self, project: str, location: str, run: str) -> dict[str, Any]:
        """The run given by id, full name, or display name (when exactly one run has it)."""
        if run.startswith("projects/"):
            return self.call("GET", run_path(project, location, run))
        if is_id(run):
            try:
                return self.call("GET", run_path(project, location, run))
            except ApiError as error:
                if error.status != "NOT_FOUND":
                    raise
        named = self.list_all(f"{location_path(project, location)}/machineLearningRuns", "machineLearningRuns",
                              limit=MAX_PAGE_SIZE, filter=f"displayName = {_quoted(run)}")
        if not named:
            raise ApiError(f"NOT_FOUND: no run with id or display name {run!r}", "NOT_FOUND")
        if len(named) > 1:
            ids = [match["name"].rsplit("/", 1)[-1] for match in named]
            shown = ", ".join(ids[:MAX_IDS_SHOWN]) + (", …" if len(ids) > MAX_IDS_SHOWN else "")
            raise ApiError(f"{run!r} names {len(ids)} runs (ids {shown}); give the id", "INVALID_ARGUMENT")
        return named[0]

    def resolve_run_path(self, project: str, location: str, run: str) -> str:
        """The API path of the run given by id, full name or display name."""
        return run_path(project, location, self.find_run(project, location, run)["name"])

    def resolve_child_path(self, project: str, location: str, run: str, collection: str, child: str = "") -> str:
        """:func:`child_path`, with the run given by id, full name or display name."""
        if run and "/" not in child:
            run = self.find_run(project, location, run)["name"]
        return child_path(project, location, run, collection, child)


def _quoted(value: str) -> str:
    """``value`` as a quoted string of the list filter."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def location_path(project: str, location: str) -> str:
    return f"v1alpha/projects/{project}/locations/{location}"


def run_path(project: str, location: str, run: str) -> str:
    """The API path of a run given by id, or by its full name (``projects/.../machineLearningRuns/R``).

    The run is taken as given; :meth:`ApiClient.resolve_run_path` also takes a display name.
    """
    if "/" in run:
        return f"v1alpha/{run.strip('/')}"
    return f"{location_path(project, location)}/machineLearningRuns/{run}"


def child_path(project: str, location: str, run: str, collection: str, child: str = "") -> str:
    """The API path of a run's collection, or of one child given by id or full name."""
    if "/" in child:
        return f"v1alpha/{child.strip('/')}"
    if not run:
        raise RunNotGiven(f"{collection} {child!r} is given by id; name its run too" if child
                          else f"{collection} belong to a run; name it")
    return f"{run_path(project, location, run)}/{collection}" + (f"/{child}" if child else "")
