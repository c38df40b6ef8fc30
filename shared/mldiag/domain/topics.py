"""The names of our topics: part of the deployment contract (Terraform and the devstack create them).

What each carries is in :mod:`mldiag.domain.messages`; which function each feeds is in :mod:`mldiag.config`.
"""

ANALYSIS_REQUESTS = "analysis-requests"
HOST_ANALYSIS_REQUESTS = "host-analysis-requests"  # one host of a multi-host session, fanned out
CAPTURE_REQUESTS = "capture-requests"
MONITORING_ALERTS = "monitoring-alerts"
MAINTENANCE_TICKS = "maintenance-ticks"
ANALYSIS_EVENTS = "analysis-events"  # CloudEvents out: analyses finished, monitored events opened and closed
