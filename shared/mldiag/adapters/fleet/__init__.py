"""Adapters for the fleet table (:class:`mldiag.ports.FleetRecords`)."""
