"""Write terraform/fleet_schema.json: the BigQuery schema of the fleet table, from the record's model.

Run after changing ``mldiag.domain.fleet.FleetRecord``; a contract test fails while the file is stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from mldiag.domain.fleet import bigquery_schema

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "terraform" / "fleet_schema.json"


def rendered() -> str:
    return json.dumps(bigquery_schema(), indent=2) + "\n"


if __name__ == "__main__":
    SCHEMA_FILE.write_text(rendered())
    print(f"wrote {SCHEMA_FILE}")
