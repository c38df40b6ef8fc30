"""The operator's side: keeping an installation healthy (maintenance, reconciliation, dead letters, replay) and
its view of it. The API's long-running operations are another thing: :mod:`mldiag.services.resources.operations`."""
