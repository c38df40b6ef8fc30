"""The run an alert names, looked up as the CLI looks one up: a full name, an id, or a display name one run has."""

from __future__ import annotations

from typing import Any, Protocol

from mldiag.domain.alerts import Alert, parse_alert
from mldiag.domain.names import LocationName
from mldiag.services.dependencies import Configured, Stored
from mldiag.services.resources.runs import find_named


class AlertRunPorts(Stored, Configured, Protocol):
    """What looking up an alert's run uses."""


def read_alert(services: AlertRunPorts, payload: Any) -> Alert:
    """``payload`` read as an alert whose ``run`` is the full name of the run it names.

    :class:`~mldiag.domain.errors.PermanentFailure` for what can never be an alert,
    :class:`~mldiag.domain.errors.NotFound` when no run has the name, and
    :class:`~mldiag.domain.errors.InvalidArgument` naming the runs that share it.
    """
    alert = parse_alert(payload)
    location = LocationName(services.settings.project, services.settings.location)
    return alert.model_copy(update={"run": find_named(services, location, alert.run).name})
