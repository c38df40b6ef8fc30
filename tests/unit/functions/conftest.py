"""What the function contract tests share: the process's services, built from the environment as a function's are."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from mldiag import bootstrap
from mldiag.services.dependencies import Services


@pytest.fixture
def function_services(tmp_path, monkeypatch) -> Iterator[Callable[..., Services]]:
    """``function_services(MLDIAG_X="...")``: the embedded services a deployed function would build from
    its environment (``bootstrap.services()``), with these settings added; rebuilt afresh for each test."""

    def build(**settings: str) -> Services:
        for name, value in {"MLDIAG_BACKEND": "embedded", "MLDIAG_DATA_DIR": str(tmp_path),
                            "MLDIAG_PROJECT": "p", "MLDIAG_LOCATION": "l", **settings}.items():
            monkeypatch.setenv(name, value)
        bootstrap.services.cache_clear()
        return bootstrap.services()

    yield build
    bootstrap.services.cache_clear()
