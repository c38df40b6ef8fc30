"""Keeping an installation healthy: maintenance, reconciliation, dead letters, replay and the operator's view."""
