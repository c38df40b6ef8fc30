"""The offline checks of ``terraform/`` get their fixtures and helpers from ``terraform_support``."""

from __future__ import annotations

from terraform_support import REPO, Planted, missing_tool, planted  # noqa: F401 (planted is a fixture)
