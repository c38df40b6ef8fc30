"""``mldiag status``: what this installation is wired to and what it holds."""

from __future__ import annotations

import typer

from mldiag.cli.output import Format, show
from mldiag.domain.resources import RESOURCE_TYPES


def status(
    fmt: Format = typer.Option(Format.table, "--format", help="Output format."),
) -> None:
    """Show the backend, where data lives, and how many of each resource are stored."""
    from mldiag import bootstrap

    services = bootstrap.build()
    settings = services.settings
    counts = {
        model.collection: len(services.store.query(model.collection))
        for model in RESOURCE_TYPES
    }
    show(
        {
            "backend": settings.backend,
            "project": settings.project,
            "location": settings.location,
            "dataDir": str(settings.data_dir) if settings.backend == "embedded" else "",
            "bucket": settings.bucket_uri,
            **counts,
        },
        fmt,
    )
