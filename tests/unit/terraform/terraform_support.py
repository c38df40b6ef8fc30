"""What the offline checks of ``terraform/`` share: the repository, the ``planted`` copy, tool checks.

The checks read the real tree; every "planted error" test runs the same check on
a temporary copy of ``terraform/`` and ``functions/`` with one defect written
into it, and asserts the check reports it.

The schema checker needs ``@cdktf/provider-google`` installed with npm, the
format check the ``terraform`` binary, the policy gate ``checkov``. Without
them those tests are skipped, unless ``MLDIAG_REQUIRE_TERRAFORM_TOOLS=1`` (as
in CI) makes a missing tool a failure.

``conftest.py`` here, and ``tests/integration/terraform/conftest.py`` for the checks
that run at length, import it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))

REQUIRE_TOOLS = os.environ.get("MLDIAG_REQUIRE_TERRAFORM_TOOLS") == "1"


def missing_tool(message: str) -> None:
    """Skip, or fail when CI requires every Terraform tool."""
    if REQUIRE_TOOLS:
        pytest.fail(f"MLDIAG_REQUIRE_TERRAFORM_TOOLS=1 but {message}", pytrace=False)
    pytest.skip(message)


class Planted:
    """A copy of ``terraform/`` and ``functions/`` to write one defect into."""

    def __init__(self, root: Path):
        self.root = root
        shutil.copytree(REPO / "terraform", root / "terraform",
                        ignore=shutil.ignore_patterns(".terraform", "*.tfstate*"))
        shutil.copytree(REPO / "functions", root / "functions",
                        ignore=shutil.ignore_patterns("__pycache__"))

    @property
    def terraform(self) -> Path:
        return self.root / "terraform"

    def replace(self, relative: str, old: str, new: str) -> None:
        """Replace the one occurrence of ``old`` in ``terraform/<relative>``."""
        path = self.terraform / relative
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {relative}"
        path.write_text(text.replace(old, new), encoding="utf-8")

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path


@pytest.fixture
def planted(tmp_path: Path) -> Planted:
    return Planted(tmp_path / "repo")
