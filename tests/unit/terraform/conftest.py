"""The offline checks of ``terraform/`` get their fixtures and helpers from ``terraform_support``
(test modules import it by that name: ``conftest`` may be another folder's when several are collected)."""

from __future__ import annotations

from terraform_support import planted  # noqa: F401 (a fixture)
