"""Business logic behind the API, the CLI and the event handlers.

Each module takes a :class:`mldiag.services.dependencies.Services` and typed inputs, and
raises :mod:`mldiag.domain.errors`; none of them knows about HTTP.
"""
