"""Business logic behind the API, the CLI and the event handlers.

Each module takes a :class:`mldiag.bootstrap.Services` and typed inputs, and
raises :mod:`mldiag.domain.errors`; none of them knows about HTTP.
"""
