"""The run an alert names, looked up as the CLI looks one up: a full name, an id, or a display name one run has."""

from __future__ import annotations

from typing import Protocol

from mldiag.domain.alerts import Alert
from mldiag.domain.names import LocationName
from mldiag.services.dependencies import Configured, Stored
from mldiag.services.resources.runs import find_named


class AlertRunPorts(Stored, Configured, Protocol):
    """What looking up an alert's run uses."""


def with_run_found(services: AlertRunPorts, alert: Alert) -> Alert:
    """``alert`` with its ``run`` the full name of the run it names.

    :class:`~mldiag.domain.errors.NotFound` when no run has the name, and
    :class:`~mldiag.domain.errors.InvalidArgument` naming the runs that share it.
    """
    location = LocationName(services.settings.project, services.settings.location)
    return alert.model_copy(update={"run": find_named(services, location, alert.run).name})
