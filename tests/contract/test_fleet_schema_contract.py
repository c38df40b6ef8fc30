"""One fleet record schema everywhere: the BigQuery table Terraform creates, the local table, the published row."""

from __future__ import annotations

import importlib.util
import json
import re
import sqlite3
import sys
from pathlib import Path

from mldiag.adapters.fleet.sqlite import SQLITE_TYPES, SqliteFleet
from mldiag.domain.fleet import bigquery_schema

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit" / "fleet"))
from fleet_support import record  # noqa: E402


def _script():
    spec = importlib.util.spec_from_file_location("fleet_schema", ROOT / "scripts" / "fleet_schema.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_schema_file_is_the_records_schema():
    script = _script()
    assert script.SCHEMA_FILE.read_text() == script.rendered(), "run scripts/fleet_schema.py"


def test_the_local_table_has_the_schemas_columns_in_its_types(tmp_path):
    SqliteFleet(tmp_path / "fleet.sqlite3")
    with sqlite3.connect(tmp_path / "fleet.sqlite3") as connection:
        columns = connection.execute("PRAGMA table_info(fleet_records)").fetchall()
    schema = json.loads(_script().SCHEMA_FILE.read_text())
    assert [(name, kind, bool(not_null)) for _, name, kind, not_null, _, _ in columns] == [
        (field["name"], SQLITE_TYPES[field["type"]], field["mode"] == "REQUIRED" or field["name"] == "record_id")
        for field in schema]


def _fits(value, field) -> bool:
    if field["mode"] == "REPEATED":
        return isinstance(value, list) and all(
            isinstance(item, dict) and set(item) == {sub["name"] for sub in field["fields"]}
            and all(_fits(item[sub["name"]], sub) for sub in field["fields"]) for item in value)
    if value is None:
        return field["mode"] == "NULLABLE"
    expected = {"STRING": str, "INT64": int, "FLOAT64": (int, float), "BOOL": bool, "TIMESTAMP": str}[field["type"]]
    return isinstance(value, expected) and not (field["type"] == "INT64" and isinstance(value, bool))


def test_the_published_row_has_exactly_the_schemas_fields_in_their_types():
    row = json.loads(json.dumps(record(labels={"team": "infra"}).row()))
    schema = json.loads(_script().SCHEMA_FILE.read_text())
    assert list(row) == [field["name"] for field in schema]
    assert [field["name"] for field in schema if not _fits(row[field["name"]], field)] == []
    assert schema == bigquery_schema()


def test_terraforms_table_reads_the_schema_file():
    sys.path.insert(0, str(ROOT / "scripts"))
    from terraform_config import load_module, unquote

    (table,) = [block for block in load_module(ROOT / "terraform")
                if block.kind == "resource" and block.labels == ("google_bigquery_table", "fleet_records")]
    source = re.fullmatch(r'\$\{file\("\$\{path\.module\}/([^"]+)"\)\}', unquote(table.body["schema"]))
    assert source is not None, "the table's schema must be file(\"${path.module}/...\")"
    assert (ROOT / "terraform" / source.group(1)).resolve() == _script().SCHEMA_FILE.resolve()
