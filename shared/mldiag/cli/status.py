"""``mldiag status``: what the control plane at ``--api-url`` is wired to and what it holds."""

from __future__ import annotations

from mldiag.cli.options import DEFAULT_API_URL, ApiUrl, Fmt, Token, api_command
from mldiag.cli.output import Format, show
from mldiag.client.api import ApiClient


@api_command
def status(api_url: ApiUrl = DEFAULT_API_URL, token: Token = "", fmt: Fmt = Format.table) -> None:
    """Show the control plane's backend, where its data lives, and how many of each resource it stores."""
    show(ApiClient(api_url, token).call("GET", "v1alpha/status"), fmt)
