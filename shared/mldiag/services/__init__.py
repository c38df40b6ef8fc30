"""Business logic behind the API, the CLI and the event handlers.

Each module takes its dependencies typed as a Protocol that names only the
ports it uses (built from the families in :mod:`mldiag.services.dependencies`,
which :class:`~mldiag.services.dependencies.Services` satisfies), and typed
inputs, and raises :mod:`mldiag.domain.errors`; none of them knows about HTTP.
"""
