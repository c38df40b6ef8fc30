"""The import contracts in ``pyproject.toml`` hold, and each of them can fail.

The contracts are checked by import-linter's engine, as ``lint-imports`` in CI
checks them. For every contract, one import that breaks it is planted (inside a
function, so function-level imports are proven to count) in a copy of the
package, and the contract must then report that very import.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from importlinter import ContractCheck, configuration
from importlinter.application import use_cases

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"
PACKAGE = REPO / "shared" / "mldiag"
CONTRACTS = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]

Import = tuple[str, str, int]  # importer, imported, line

configuration.configure()


def contract_checks(package_parent: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, ContractCheck]:
    """Each contract's check, by name, on the ``mldiag`` package found in ``package_parent``."""
    with monkeypatch.context() as patch:
        # grimp locates the root package with importlib, which prefers an already imported one.
        patch.delitem(sys.modules, "mldiag", raising=False)
        patch.syspath_prepend(str(package_parent))
        # The registry of contract types is filled by lint_imports, which renders to the console.
        use_cases._register_built_in_contract_types()
        report = use_cases.create_report(use_cases.read_user_options(str(PYPROJECT)), cache_dir=None)
    assert not report.could_not_run and not report.invalid_contract_options, report.invalid_contract_options
    return {contract.name: check for contract, check in report.get_contracts_and_checks()}


def cited_imports(metadata: Any) -> Iterator[Import]:
    """Every direct import a contract check cites, wherever its report nests it."""
    if isinstance(metadata, dict):
        if {"importer", "imported", "line_numbers"} <= metadata.keys():
            for line in metadata["line_numbers"]:
                yield metadata["importer"], metadata["imported"], line
        for value in metadata.values():
            yield from cited_imports(value)
    elif isinstance(metadata, (list, tuple)):
        for value in metadata:
            yield from cited_imports(value)


def _layer_modules(layer: str) -> list[str]:
    """The modules of one entry of ``layers``: siblings split by ``|`` or ``:``, optional ones in ()."""
    return [module.strip().strip("()") for module in layer.replace(":", "|").split("|")]


def _lower_layer_imports_a_higher_one(contract: dict[str, Any]) -> tuple[str, str]:
    container = contract["containers"][0] + "." if "containers" in contract else ""
    return (container + _layer_modules(contract["layers"][-1])[0],
            container + _layer_modules(contract["layers"][0])[0])


def _source_imports_a_forbidden_module(contract: dict[str, Any]) -> tuple[str, str]:
    return contract["source_modules"][0], contract["forbidden_modules"][0]


VIOLATIONS: dict[str, Callable[[dict[str, Any]], tuple[str, str]]] = {
    "layers": _lower_layer_imports_a_higher_one,
    "forbidden": _source_imports_a_forbidden_module,
}


def module_file(package_parent: Path, module: str) -> Path:
    path = package_parent.joinpath(*module.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    raise AssertionError(f"{module} is neither a package nor a module under {package_parent}")


def plant_import(package_parent: Path, importer: str, imported: str) -> Import:
    """Add ``import <imported>`` inside a new function of ``importer``; return the import as cited."""
    path = module_file(package_parent, importer)
    lines = path.read_text(encoding="utf-8").splitlines()
    lines += ["", "", "def _planted_violation():", f"    import {imported}", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return importer, imported, len(lines) - 1


def copy_package(destination: Path) -> Path:
    shutil.copytree(PACKAGE, destination / "mldiag", ignore=shutil.ignore_patterns("__pycache__"))
    return destination


def test_every_import_contract_is_kept(monkeypatch):
    broken = [f"{name}, through:\n" + "\n".join(f"  {importer} -> {imported} (l.{line})" for importer, imported, line
                                                 in sorted(set(cited_imports(check.metadata))))
              for name, check in contract_checks(PACKAGE.parent, monkeypatch).items() if not check.kept]
    assert not broken, "broken import contracts (cd shared && lint-imports ../pyproject.toml draws the chains):\n" + \
        "\n".join(broken)


@pytest.mark.parametrize("contract", CONTRACTS, ids=[contract["name"] for contract in CONTRACTS])
def test_a_planted_violation_breaks_the_contract(contract, tmp_path, monkeypatch):
    violation = VIOLATIONS.get(contract["type"])
    assert violation, f"no planted violation for contracts of type {contract['type']!r}: add one to VIOLATIONS"
    package_parent = copy_package(tmp_path)
    planted = plant_import(package_parent, *violation(contract))

    check = contract_checks(package_parent, monkeypatch)[contract["name"]]

    assert not check.kept
    assert planted in set(cited_imports(check.metadata)), f"{planted} is not among the imports the contract cites"

